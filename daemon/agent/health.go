package agent

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// health is what the daemon's goroutines report about its state, for the
// watchdog, the status line and the HTTP endpoint: the main loop, the GPU
// sampler, the log sources and the reloader write it, the supervisor and
// the endpoint read it. Every field is atomic or under mu; nothing else
// is shared between those goroutines.
type health struct {
	// When the main loop last ran and the last GPU reading arrived (Unix
	// ns), for the watchdog.
	loopAt, gpuAt atomic.Int64
	gpuOpen       atomic.Bool // a GPU backend is open
	gpuBackend    atomic.Bool // a GPU backend is configured (not none)
	gpus          atomic.Int64
	unreadable    atomic.Int64 // servers whose last scrape failed
	servers       atomic.Int64

	mu sync.Mutex
	// srcErr holds why a server's log cannot be read (journalctl's or the
	// file's own error); unplaced why a server with gpus: auto has no
	// GPUs (gpumap guesses nothing); reloadErr why the last reload was
	// rejected, "" when it was applied (or none came).
	srcErr    map[string]string
	unplaced  map[string]string
	reloadErr string
}

// reloadFailed records why the last reload was rejected (err != nil), or
// that it was applied.
func (h *health) reloadFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reloadErr = ""
	if err != nil {
		h.reloadErr = err.Error()
	}
}

// lastReloadError is why the last reload was rejected; "" if it was not.
func (h *health) lastReloadError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reloadErr
}

// sourceFailed records (err != nil) or clears why a server's log source
// cannot be read.
func (h *health) sourceFailed(server string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.srcErr, server)
		return
	}
	if h.srcErr == nil {
		h.srcErr = make(map[string]string)
	}
	h.srcErr[server] = err.Error()
}

// sourceErrors lists "server: reason" for every log source that cannot
// be read, sorted.
func (h *health) sourceErrors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return reasons(h.srcErr)
}

// unplacedFor records why server could not be placed on its GPUs; false
// when that was already the reason.
func (h *health) unplacedFor(server, why string) (changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unplaced[server] == why {
		return false
	}
	if h.unplaced == nil {
		h.unplaced = map[string]string{}
	}
	h.unplaced[server] = why
	return true
}

// placedNow clears why server could not be placed.
func (h *health) placedNow(server string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.unplaced, server)
}

// unattributed lists "server: reason" for every server with gpus: auto
// whose GPUs could not be told, sorted.
func (h *health) unattributed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return reasons(h.unplaced)
}

// restarted forgets what the sources said: they start again, with
// servers of them, and say anew.
func (h *health) restarted(servers int) {
	h.mu.Lock()
	clear(h.srcErr)
	clear(h.unplaced)
	h.mu.Unlock()
	h.servers.Store(int64(servers))
	h.unreadable.Store(0)
}

// reasons lists "server: reason" for each entry of m, sorted.
func reasons(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for s, why := range m {
		out = append(out, s+": "+why)
	}
	sort.Strings(out)
	return out
}

// healthy reports whether the main loop and the GPU sampler made progress
// recently; the watchdog is fed only then, so a stuck joiner or a hung
// driver call ends in a restart by systemd.
func (h *health) healthy(now time.Time, stale time.Duration) bool {
	if now.Sub(time.Unix(0, h.loopAt.Load())) > stale {
		return false
	}
	if h.gpuOpen.Load() && now.Sub(time.Unix(0, h.gpuAt.Load())) > stale {
		return false
	}
	return true
}

// status is the one-line state systemd shows.
func (h *health) status() string {
	s := fmt.Sprintf("monitoring %d servers", h.servers.Load())
	logErrs := h.sourceErrors()
	if n := h.unreadable.Load() + int64(len(logErrs)); n > 0 {
		s += fmt.Sprintf(" (%d unreadable)", n)
	}
	switch {
	case !h.gpuBackend.Load():
		s += ", GPUs not sampled"
	case h.gpuOpen.Load():
		s += fmt.Sprintf(", %d GPUs", h.gpus.Load())
	default:
		s += ", GPU sampling unavailable"
	}
	if len(logErrs) > 0 {
		s += "; " + logErrs[0]
	}
	if h.lastReloadError() != "" {
		s += "; reload rejected, the running configuration stays (see the log)"
	}
	return s
}
