package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/internal/influxql"
	"github.com/tpsmon/tpsmon/testkit/influxtest"
)

// one is an answer of one series named name.
func one(name string) string {
	return fmt.Sprintf(`{"results":[{"statement_id":0,"series":[{"name":%q,"columns":["time"],"values":[[1]]}]}]}`, name)
}

// TestAnswerFaults: the client's timeout bounds InfluxDB's wait before
// an answer and the reading of it, not the wait of an answer opened
// ahead for its reader; a body that is no answer is shown.
func TestAnswerFaults(t *testing.T) {
	const timeout = 150 * time.Millisecond
	body := one("m")
	tests := []struct {
		name    string
		handler func(w http.ResponseWriter, r *http.Request)
		wait    time.Duration // between Open and Each
		openErr error         // errors.Is
		eachErr string        // in the error of Each; "": none
		timeout time.Duration // the client's; 0: timeout
	}{
		{"answered, read after a wait longer than the timeout", func(w http.ResponseWriter, r *http.Request) {
			// More than the client buffers on opening: the rest is read
			// from the connection after the wait.
			fmt.Fprintf(w, `{"results":[{"statement_id":0,"series":[{"name":"m","columns":["time"],"values":[[1]%s]}]}]}`, strings.Repeat(",[1]", 20000))
			// The reading itself must fit in the timeout: 50 ms under -race
			// on a quiet machine, over 150 ms on a loaded one (CI).
		}, 1500 * time.Millisecond, nil, "", time.Second},
		{"headers, then no answer", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush() // as InfluxDB does before it runs the query
			<-r.Context().Done()
		}, 0, errTimeout, "", 0},
		{"an answer that stops halfway", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, body[:len(body)/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}, 0, nil, "InfluxDB too slow", 0},
		{"a proxy's page", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html>502 Bad Gateway</html>")
		}, 0, nil, "HTTP 502 Bad Gateway: <html>502 Bad Gateway</html>", 0},
		{"the server's error", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"error parsing query: found EOF"}`)
		}, 0, nil, "error parsing query: found EOF", 0},
		{"an empty body", func(w http.ResponseWriter, r *http.Request) {}, 0, nil, "HTTP 200 OK: ", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tc.handler))
			defer srv.Close()
			to := timeout
			if tc.timeout > 0 {
				to = tc.timeout
			}
			c := NewClient(srv.URL, "db", "", to)
			t0 := time.Now()
			a, err := c.Open(context.Background(), "SELECT 1")
			if tc.openErr != nil {
				if !errors.Is(err, tc.openErr) {
					t.Fatalf("open: %v, want %v", err, tc.openErr)
				}
				if d := time.Since(t0); d > 20*to {
					t.Errorf("open gave up after %v, timeout %v", d, to)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			time.Sleep(tc.wait)
			var got []string
			err = a.Each(func(s influxql.Series) error { got = append(got, s.Name); return nil })
			switch {
			case tc.eachErr == "" && err != nil:
				t.Fatalf("each: %v", err)
			case tc.eachErr == "" && !slices.Equal(got, []string{"m"}):
				t.Errorf("series %v, want m", got)
			case tc.eachErr != "" && (err == nil || !strings.Contains(err.Error(), tc.eachErr)):
				t.Errorf("each: %v, want %q in it", err, tc.eachErr)
			}
		})
	}
}

// TestAheadTakesInAnyOrder: answers opened ahead are taken in any order,
// each its own, while InfluxDB runs at most InFlight queries at once and
// the first error ends the others.
func TestAheadTakesInAnyOrder(t *testing.T) {
	var mu sync.Mutex
	running, most := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // running the query
		mu.Lock()
		running--
		mu.Unlock()
		q := r.FormValue("q")
		if q == "q-bad" {
			fmt.Fprint(w, `{"results":[{"statement_id":0,"error":"boom"}]}`)
			return
		}
		fmt.Fprint(w, one(q))
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "db", "", 5*time.Second)
	var fs []fetch
	for i := range 3 * InFlight {
		fs = append(fs, fetch{fmt.Sprint("n", i), fmt.Sprint("q", i)})
	}
	a := openAhead(context.Background(), c, fs)
	for i := len(fs) - 1; i >= 0; i-- { // the last first: none waits for another's reader
		s, ok, err := a.take(fs[i].text)
		if !ok || err != nil {
			t.Fatalf("take %s: %v %v", fs[i].text, ok, err)
		}
		var got []string
		if err := s.Each(func(x influxql.Series) error { got = append(got, x.Name); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{fs[i].text}) {
			t.Errorf("%s: series %v", fs[i].text, got)
		}
	}
	if _, ok, _ := a.take("q0"); ok {
		t.Error("an answer taken twice")
	}
	a.close()
	if most > InFlight || most < 2 {
		t.Errorf("InfluxDB ran %d queries at once, want 2 to %d", most, InFlight)
	}

	// A statement's error comes with its answer; a query that cannot be
	// sent ends the others, and its error, named, is theirs.
	a = openAhead(context.Background(), c, []fetch{{"bad", "q-bad"}})
	s, _, err := a.take("q-bad")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Each(func(influxql.Series) error { return nil }); err == nil || err.Error() != "influx query: boom" {
		t.Errorf("statement error %v, want the server's boom", err)
	}
	a.close()
	dead := NewClient("http://127.0.0.1:1", "db", "", 5*time.Second)
	a = openAhead(context.Background(), dead, fs[:2])
	defer a.close()
	for _, f := range fs[:2] {
		if _, _, err := a.take(f.text); err == nil || !strings.Contains(err.Error(), "influx query") {
			t.Errorf("take %s: %v, want the failed query's error", f.text, err)
		}
	}
}

// jsonOnly drops the Accept header, as a server without MessagePack
// ignores it: the answer comes as JSON.
type jsonOnly struct{}

func (jsonOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Del("Accept")
	return http.DefaultTransport.RoundTrip(r)
}

// TestMsgpackAnswersAsJSON: InfluxDB 1.8's MessagePack answers read as
// its JSON ones do, series by series and value by value, errors too.
func TestMsgpackAnswersAsJSON(t *testing.T) {
	t.Parallel()
	base := influxtest.URL(t)
	db := influxtest.CreateDB(t, base, "msgpack")
	influxtest.Write(t, base, db, strings.Join([]string{
		`m,host=a,server=s\ 1 f=1.5,i=12345678901234567i,s="ok, \"quoted\";a=1",b=true 1700000000000`,
		`m,host=a,server=s\ 1 f=-2e300,i=-3i,s="",b=false 1700000010000`,
		`m,host=b,server=é f=0,i=0i,s="x" 1700000020000`,
	}, "\n"))
	packed := NewClient(base, db, "", 30*time.Second)
	plain := NewClient(base, db, "", 30*time.Second)
	plain.HTTP = &http.Client{Transport: jsonOnly{}}
	for i, q := range []string{
		`SELECT * FROM m GROUP BY *`,
		`SELECT mean(f), sum(i), count(s), median(f), last(b) FROM m WHERE time >= 1699999990s AND time < 1700000030s GROUP BY time(10s), host fill(none)`,
		`SELECT f FROM m WHERE s = 'none'`,
		`SELECT nosuch FROM m`,
		`SELECT FROM`,
		`SELECT * FROM "nosuchdb".."m"`,
	} {
		p, pErr := packed.Query(context.Background(), q)
		j, jErr := plain.Query(context.Background(), q)
		if fmt.Sprint(pErr) != fmt.Sprint(jErr) {
			t.Errorf("%s: MessagePack's error %v, JSON's %v", q, pErr, jErr)
		}
		if len(p) != len(j) || i < 2 && len(j) < 2 {
			t.Fatalf("%s: %d series, JSON's %d", q, len(p), len(j))
		}
		for i := range j {
			if p[i].Name != j[i].Name || !slices.Equal(p[i].Columns, j[i].Columns) || fmt.Sprint(p[i].Tags) != fmt.Sprint(j[i].Tags) || len(p[i].Values) != len(j[i].Values) {
				t.Fatalf("%s: series %d %+v, JSON's %+v", q, i, p[i], j[i])
			}
			for r := range j[i].Values {
				for c := range j[i].Values[r] {
					pv, jv := p[i].Values[r][c], j[i].Values[r][c]
					pn, pok := influxql.Num(pv)
					jn, jok := influxql.Num(jv)
					if pok != jok || pok && pn != jn || !pok && pv != jv {
						t.Errorf("%s: row %d %s: %#v, JSON's %#v", q, r, p[i].Columns[c], pv, jv)
					}
				}
			}
		}
	}
	// The first answer was MessagePack indeed.
	a, err := packed.Open(context.Background(), `SELECT * FROM m`)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !a.packed {
		t.Error("InfluxDB 1.8 answered in JSON")
	}
}
