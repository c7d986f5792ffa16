package victoriatest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWriteRestartRead: line protocol taken on /write is read back by the
// query API as <measurement>_<field> with the tags as labels, the db label
// from ?db=, duplicates kept, integers exact and other floats to the
// store's precision; and all of it is there after a restart.
func TestWriteRestartRead(t *testing.T) {
	t.Parallel()
	vm := Start(t)
	at := time.Now().Truncate(time.Second).Add(-time.Minute)
	values := []float64{1, 123456789, 0.5, 0.1, 1.0 / 3, 2998.123456789012, 1e-7}
	var lp strings.Builder
	for i, v := range values {
		fmt.Fprintf(&lp, "m,host=h,k=%d f=%v,n=%di %d\n", i, v, i, at.Add(time.Duration(i)*time.Second).UnixMilli())
	}
	// The first line again: the store keeps both.
	fmt.Fprintf(&lp, "m,host=h,k=0 f=1,n=0i %d\n", at.UnixMilli())
	resp, err := http.Post(vm.URL+"/write?db=tdb&precision=ms", "text/plain", strings.NewReader(lp.String()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write: HTTP %d", resp.StatusCode)
	}
	vm.Stop()
	vm.Resume()

	got := map[string]Series{}
	for _, s := range vm.Raw(t, `{__name__=~"m_.*",db="tdb"}`, at.Add(time.Hour), 2*time.Hour) {
		got[s.Labels["__name__"]+"/"+s.Labels["k"]] = s
	}
	if len(got) != 2*len(values) {
		t.Fatalf("%d series, want %d: %v", len(got), 2*len(values), got)
	}
	for i, v := range values {
		f := got[fmt.Sprintf("m_f/%d", i)]
		n := got[fmt.Sprintf("m_n/%d", i)]
		want := 1
		if i == 0 {
			want = 2
		}
		if len(f.Samples) != want || len(n.Samples) != want {
			t.Fatalf("k=%d: %v and %v, want %d samples each", i, f, n, want)
		}
		ts := at.Add(time.Duration(i) * time.Second)
		if !f.Samples[0].T.Equal(ts) || f.Labels["host"] != "h" {
			t.Errorf("k=%d: %v at %v, want at %v with host=h", i, f.Labels, f.Samples[0].T, ts)
		}
		if n.Samples[0].V != float64(i) {
			t.Errorf("k=%d: integer field read %v", i, n.Samples[0].V)
		}
		if d := RelDiff(f.Samples[0].V, v); d > Precision {
			t.Errorf("k=%d: %v read back as %v (relative %.2g, more than %g)", i, v, f.Samples[0].V, d, Precision)
		}
	}
}
