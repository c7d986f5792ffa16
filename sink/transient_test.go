package sink

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// TestProxy413IsTransient puts a proxy that answers 413 to every write in
// front of the real InfluxDB until the sender's health says why: the points
// are kept and retried meanwhile, and all of them arrive, none quarantined.
func TestProxy413IsTransient(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "proxy413")
	target, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(target)
	// Refusing until the health was seen to say so, not for a fixed time:
	// a loaded machine may take longer than any fixed time to get there.
	var refusing atomic.Bool
	refusing.Store(true)
	var refused atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/write") && refusing.Load() {
			refused.Add(1)
			http.Error(w, "<html>413 Request Entity Too Large</html>", http.StatusRequestEntityTooLarge)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()

	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	in, _ := NewInflux(InfluxConfig{URL: proxy.URL, Bucket: db + "/autogen", Timeout: 5 * time.Second})
	defer in.Close()
	s := &Sender{Spool: sp, W: in, Log: quiet()}
	for i := range 12 {
		if err := sp.Append([]byte(fmt.Sprintf("tpsmon_server,host=h tokens=%di %d\n", i, 1_700_000_000_000+int64(i)*1000))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go s.Run(ctx)

	sawReason := false
	for ctx.Err() == nil {
		if h := s.Health(); strings.Contains(h.LastError, "413") && strings.Contains(h.LastError, "too large") {
			sawReason = true
			refusing.Store(false)
		}
		if sp.Stats().Points == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if refused.Load() == 0 {
		t.Fatal("the proxy refused nothing: the test did not test")
	}
	if !sawReason {
		t.Error("health never said the writes were refused as too large")
	}
	if q := sp.Stats().Quarantined; q != 0 {
		t.Errorf("%d points quarantined for a proxy's limit", q)
	}
	rows := influxtest.Query(t, base, db, "SELECT count(tokens) FROM tpsmon_server")
	if len(rows) != 1 || fmt.Sprint(rows[0].Values[0][1]) != "12" {
		t.Errorf("InfluxDB holds %v, want 12 points", rows)
	}
	if h := s.Health(); h.LastError != "" {
		t.Errorf("after recovery the health still says %q", h.LastError)
	}
}

// TestTypeConflictQuarantinesOnlyThePoint: the real InfluxDB refuses one
// point for its field type (400): that point alone is quarantined.
func TestTypeConflictQuarantinesOnlyThePoint(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "conflict")
	sp, s := realSender(t, base, db, spool.Options{Dir: t.TempDir()})
	var b strings.Builder
	for i := range 10 {
		v := fmt.Sprintf("%di", i)
		if i == 6 {
			v = `"six"` // a string where the others are integers
		}
		fmt.Fprintf(&b, "tpsmon_server,host=h tokens=%s %d\n", v, 1_700_000_000_000+int64(i)*1000)
	}
	sp.Append([]byte(b.String()))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if q := sp.Stats().Quarantined; q != 1 {
		t.Errorf("%d points quarantined, want the one with the conflict", q)
	}
	rows := influxtest.Query(t, base, db, "SELECT count(tokens) FROM tpsmon_server")
	if len(rows) != 1 || fmt.Sprint(rows[0].Values[0][1]) != "9" {
		t.Errorf("InfluxDB holds %v, want 9 points", rows)
	}
}
