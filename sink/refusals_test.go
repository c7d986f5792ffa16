package sink

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tpsmon/tpsmon/sink/spool"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// typeConflict refuses, as InfluxDB 1.8 does a field type conflict, every
// line with tokens="bad" and stores the others.
type typeConflict struct{}

func (typeConflict) Write(_ context.Context, lines []byte) error {
	if n := bytes.Count(lines, []byte(`tokens="bad"`)); n > 0 {
		return &WriteError{Status: http.StatusBadRequest, Err: fmt.Errorf(`partial write: field type conflict: input field "tokens" on measurement "m" is type string, already exists as type integer dropped=%d`, n)}
	}
	return nil
}

// syncLog is a log the test reads while the sender writes it.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestRefusalEpisodes: a group's refused points are one episode, logged at
// its start and every 10 minutes, listed in Health while they last, ended
// by a batch in which the group's points are taken and none refused, or by
// 30 minutes without a refusal; a batch that takes some of its points and
// refuses others does not end it.
func TestRefusalEpisodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer sp.Close()
		var logs syncLog
		s := &Sender{Spool: sp, W: typeConflict{}, Log: slog.New(slog.NewTextHandler(&logs, nil))}
		ts := int64(0)
		line := func(server, v string) string {
			ts++
			return fmt.Sprintf("m,host=h,server=%s tokens=%s %d\n", server, v, ts)
		}
		steps := []struct {
			name     string
			wait     time.Duration // before the batch
			batch    string
			refusing map[string]uint64 // server: points refused in the episode
			errors   int               // ERROR lines so far
			ended    int               // episodes logged as ended so far
		}{
			{"a refused, b taken", 0, line("a", `"bad"`) + line("b", "1i"), map[string]uint64{"a": 1}, 1, 0},
			{"a refused again: no new line", time.Second, line("a", `"bad"`), map[string]uint64{"a": 2}, 1, 0},
			{"ten minutes on: a summary", 10 * time.Minute, line("a", `"bad"`), map[string]uint64{"a": 3}, 2, 0},
			{"a taken and refused in one batch", time.Second, line("a", "1i") + line("a", `"bad"`), map[string]uint64{"a": 4}, 2, 0},
			{"a taken: over", time.Second, line("a", "2i"), map[string]uint64{}, 2, 1},
			{"c refused", time.Second, line("c", `"bad"`), map[string]uint64{"c": 1}, 3, 1},
			{"31 minutes without c: over", 31 * time.Minute, line("b", "2i"), map[string]uint64{}, 3, 2},
			{"a line that does not parse", time.Second, "m,server=a,oops tokens=\"bad\" 1\n", map[string]uint64{"a": 1}, 4, 2},
		}
		for _, st := range steps {
			time.Sleep(st.wait)
			if err := sp.Append([]byte(st.batch)); err != nil {
				t.Fatal(err)
			}
			if err := s.Flush(context.Background()); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			got := map[string]uint64{}
			for _, r := range s.Health().Refusing {
				got[r.Server] = r.Points
				if r.Measurement != "m" || !strings.Contains(r.Reason, "field type conflict") {
					t.Errorf("%s: %+v", st.name, r)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(st.refusing) {
				t.Errorf("%s: refusing %v, want %v", st.name, got, st.refusing)
			}
			if n := logs.count("level=ERROR"); n != st.errors {
				t.Errorf("%s: %d ERROR lines, want %d", st.name, n, st.errors)
			}
			if n := logs.count("level=INFO"); n != st.ended {
				t.Errorf("%s: %d episodes logged as ended, want %d", st.name, n, st.ended)
			}
		}
		if h := s.Health(); h.Refused != 6 {
			t.Errorf("%d points counted refused, want 6", h.Refused)
		}
	})
}

// TestRefusalEpisodesBounded: the groups followed one by one are bounded;
// the servers beyond share an entry.
func TestRefusalEpisodesBounded(t *testing.T) {
	sp, err := spool.Open(spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	s := &Sender{Spool: sp, W: typeConflict{}, Log: quiet()}
	var b strings.Builder
	for i := range 3 * maxEpisodes {
		fmt.Fprintf(&b, "m,server=s%d tokens=\"bad\" %d\n", i, i)
	}
	sp.Append([]byte(b.String()))
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rs := s.Health().Refusing
	var total uint64
	others := false
	for _, r := range rs {
		total += r.Points
		others = others || r.Server == othersTag
	}
	if len(rs) > maxEpisodes+1 || !others || total != 3*maxEpisodes {
		t.Errorf("%d groups (others among them: %v) with %d points, want at most %d holding all %d", len(rs), others, total, maxEpisodes+1, 3*maxEpisodes)
	}
}

// TestShortReason: InfluxDB's message of a 70 KB line keeps its start and
// why, at the end.
func TestShortReason(t *testing.T) {
	msg := "influx write: HTTP 400: unable to parse 'm,model=" + strings.Repeat("模", 25<<10) + " v=1i 1000': max key length exceeded: 70008 > 65535"
	got := shortReason(msg)
	if len(got) > maxReason || !strings.HasPrefix(got, "influx write: HTTP 400: unable to parse") ||
		!strings.HasSuffix(got, "max key length exceeded: 70008 > 65535") || !strings.Contains(got, cutSep) {
		t.Errorf("%d bytes: %q", len(got), got)
	}
	if short := "partial write: field type conflict"; shortReason(short) != short {
		t.Errorf("a short message changed: %q", shortReason(short))
	}
}

// TestRefusedBatchesKeepQuarantineBounded: the real InfluxDB refuses batch
// after batch (a field type conflict another client caused); the
// quarantine stays within its bound, and the points it holds and those it
// let go add up to every point refused.
func TestRefusedBatchesKeepQuarantineBounded(t *testing.T) {
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "quarbound")
	const bound = 64 << 10
	start := int64(1_700_000_000_000)
	influxtest.Write(t, base, db, fmt.Sprintf(`m,host=evil tokens="poison" %d`, start-1))
	dir := t.TempDir()
	sp, s := realSender(t, base, db, spool.Options{Dir: dir, QuarantineMaxBytes: bound})
	const batches, points = 20, 40
	for i := range batches {
		var b strings.Builder
		for j := range points {
			fmt.Fprintf(&b, "m,host=h,server=llm,model=%s tokens=%di %d\n", strings.Repeat("x", 100), j, start+int64(i*points+j))
		}
		sp.Append([]byte(b.String()))
		if err := s.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := sp.Stats(); st.QuarantineBytes > bound {
			t.Fatalf("after %d refused batches the quarantine holds %d bytes, over its bound %d", i+1, st.QuarantineBytes, bound)
		}
	}
	var onDisk int64
	kept := 0
	entries, _ := os.ReadDir(filepath.Join(dir, "quarantine"))
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, "quarantine", e.Name()))
		onDisk += int64(len(b))
		kept += strings.Count(string(b), "\nm,")
	}
	st := sp.Stats()
	if onDisk > bound || onDisk != st.QuarantineBytes {
		t.Errorf("%d bytes on disk (stats say %d), bound %d", onDisk, st.QuarantineBytes, bound)
	}
	if h := s.Health(); h.Refused != batches*points || st.Quarantined != batches*points {
		t.Errorf("%d points counted refused, %d quarantined, want %d", h.Refused, st.Quarantined, batches*points)
	}
	if got := kept + int(st.QuarantineDroppedPoints); got != batches*points || st.QuarantineDroppedPoints == 0 {
		t.Errorf("%d points kept + %d dropped = %d, want the %d refused, some dropped", kept, st.QuarantineDroppedPoints, got, batches*points)
	}
	t.Logf("%d refused points: %d kept in %d bytes (%d files), %d dropped in %d bytes", batches*points, kept, onDisk, len(entries), st.QuarantineDroppedPoints, st.QuarantineDroppedBytes)
}

// TestGroupOf reads the measurement and server tag of the lines the
// encoder writes, escapes included.
func TestGroupOf(t *testing.T) {
	enc := NewEncoder()
	tests := []struct {
		tags   []Tag
		server string
	}{
		{[]Tag{{"host", "h"}, {"server", "llm"}}, "llm"},
		{[]Tag{{"host", "h"}}, ""},
		{[]Tag{{"model", `a\,b=c d`}, {"server", `x,y=z w\`}}, TagValue(`x,y=z w\`)},
		{[]Tag{{"server", "s"}, {"uuid", "GPU-1"}}, "s"},
		{[]Tag{{"server", strings.Repeat("s", 1000)}}, TagValue(strings.Repeat("s", 1000))},
	}
	for _, tc := range tests {
		line, err := enc.Append(nil, Point{Measurement: "tpsmon gpu,x", Tags: tc.tags, Fields: []Field{{"v", 1.0}}, Time: time.Unix(1, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if g := groupOf(bytes.TrimSuffix(line, []byte("\n"))); g != (group{"tpsmon gpu,x", tc.server}) {
			t.Errorf("%s: %+v, want server %q", line, g, tc.server)
		}
	}
}
