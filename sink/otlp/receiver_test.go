package otlp

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP metrics receiver on loopback: it decodes each
// request's protobuf and keeps its data points, unless answer says
// otherwise for it.
type receiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	// answer returns the status (0: 200) and, for a 200, the points a
	// partial success rejects; nil: 200 for everything.
	answer   func(req *metricpb.MetricsData) (status int, rejected int64)
	points   map[string][]float64 // by pointKey; more than one value: sent twice
	requests int
	header   http.Header // of the last request
	wire     int         // bytes of the last request's body, as sent
	raw      int         // and its protobuf
	resource map[string]string
	bad      []string // what the receiver could not read
}

// point is one received data point: the series (name and sorted
// attributes) and its time.
func pointKey(name string, attrs []*commonpb.KeyValue, timeNS uint64) string {
	kv := make([]string, 0, len(attrs))
	for _, a := range attrs {
		kv = append(kv, a.GetKey()+"="+a.GetValue().GetStringValue())
	}
	slices.Sort(kv)
	return fmt.Sprintf("%s{%s}@%d", name, strings.Join(kv, ","), timeNS)
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{points: map[string][]float64{}}
	r.srv = httptest.NewServer(r)
	t.Cleanup(r.srv.Close)
	return r
}

// restart serves again on the address of a closed receiver.
func (r *receiver) restart(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	r.srv = httptest.NewUnstartedServer(r)
	r.srv.Listener.Close()
	r.srv.Listener = ln
	r.srv.Start()
	t.Cleanup(r.srv.Close)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	var wire countingReader
	wire.r = hr.Body
	var body io.Reader = &wire
	if hr.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(&wire)
		if err != nil {
			r.fail(w, "gzip: "+err.Error())
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		r.fail(w, err.Error())
		return
	}
	// MetricsData is ExportMetricsServiceRequest on the wire (field 1,
	// repeated ResourceMetrics): read with it, the request is checked by
	// the official types without the collector service's package, which
	// would bring gRPC into go.mod.
	var req metricpb.MetricsData
	if hr.URL.Path != DefaultPath || hr.Header.Get("Content-Type") != "application/x-protobuf" {
		r.fail(w, "path "+hr.URL.Path+", content type "+hr.Header.Get("Content-Type"))
		return
	}
	if err := proto.Unmarshal(b, &req); err != nil {
		r.fail(w, "protobuf: "+err.Error())
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.header = hr.Header.Clone()
	r.wire, r.raw = wire.n, len(b)
	status, rejected := 0, int64(0)
	if r.answer != nil {
		status, rejected = r.answer(&req)
	}
	if status != 0 && status != http.StatusOK {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "refused by the test", status)
		return
	}
	if rejected > 0 {
		// A partial success keeps nothing here: the test's points are
		// all or none per request.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(exportResponse(rejected, "refused by the test"))
		return
	}
	for _, rm := range req.GetResourceMetrics() {
		r.resource = map[string]string{}
		for _, a := range rm.GetResource().GetAttributes() {
			r.resource[a.GetKey()] = a.GetValue().GetStringValue()
		}
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				g := m.GetGauge()
				if g == nil {
					r.bad = append(r.bad, m.GetName()+": not a gauge")
					continue
				}
				if m.GetUnit() != "" {
					r.bad = append(r.bad, m.GetName()+": unit "+m.GetUnit())
				}
				for _, dp := range g.GetDataPoints() {
					k := pointKey(m.GetName(), dp.GetAttributes(), dp.GetTimeUnixNano())
					r.points[k] = append(r.points[k], dp.GetAsDouble())
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(exportResponse(0, ""))
}

func (r *receiver) fail(w http.ResponseWriter, why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// got returns a copy of the points received, and what it could not read.
func (r *receiver) got() (map[string][]float64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string][]float64, len(r.points))
	for k, v := range r.points {
		out[k] = slices.Clone(v)
	}
	return out, slices.Clone(r.bad)
}

// hasServer tells whether a request holds a point of server.
func hasServer(req *metricpb.MetricsData, server string) bool {
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, dp := range m.GetGauge().GetDataPoints() {
					for _, a := range dp.GetAttributes() {
						if a.GetKey() == "server" && a.GetValue().GetStringValue() == server {
							return true
						}
					}
				}
			}
		}
	}
	return false
}

// exportResponse encodes an ExportMetricsServiceResponse: partial_success
// (1) holding rejected_data_points (1) and error_message (2); none for a
// full success, an empty message as receivers send it.
func exportResponse(rejected int64, message string) []byte {
	if rejected == 0 && message == "" {
		return nil
	}
	var ps []byte
	ps = protowire.AppendTag(ps, 1, protowire.VarintType)
	ps = protowire.AppendVarint(ps, uint64(rejected))
	ps = protowire.AppendTag(ps, 2, protowire.BytesType)
	ps = protowire.AppendString(ps, message)
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	return protowire.AppendBytes(b, ps)
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
