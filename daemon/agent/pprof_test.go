package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPprofOnlyWhenAsked: Go's profiles are served only with http.pprof,
// since anyone who reaches the port could read them.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		pprof bool
		code  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		h := (&telemetry{health: &health{}, metrics: newMetrics(), pprof: tc.pprof}).handler()
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/allocs?debug=1"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != tc.code {
				t.Errorf("pprof=%v GET %s: %d, want %d", tc.pprof, path, rec.Code, tc.code)
			}
		}
	}
}
