package latency

import (
	"fmt"
	"math"

	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/window"
)

// Sources of a window's latencies (the latency_source field).
const (
	SourceRequests  = "requests"  // each request's own line: exact
	SourceHistogram = "histogram" // the engine's histograms: interpolated, with bounds
)

// Quantiles the fields hold.
var (
	TTFTQ = [3]float64{0.5, 0.9, 0.99}
	ITLQ  = [3]float64{0.5, 0.9, 0.99}
	E2EQ  = [2]float64{0.5, 0.99}
	QueQ  = [2]float64{0.5, 0.99}
	TPSQ  = [2]float64{0.1, 0.5}
)

// Summary is what one user felt in one window of one server.
//
// From per-request lines (Source requests) every quantile is exact and ITL
// is each request's mean gap between tokens (its time per output token):
// a log does not print the gaps themselves. From histograms (Source
// histogram) ITL is the engine's per-gap histogram, the quantiles are
// interpolated in their buckets with the buckets' bounds, and per-user
// speed is 1 / the per-request time per output token (vLLM ≥ 0.11, TGI):
// per-gap latencies do not say what one request saw.
type Summary struct {
	Source     string
	TTFT, ITL  [3]Quantile
	E2E, Queue [2]Quantile
	PerUserTPS [2]Quantile // p10, p50 of output tokens after the first ÷ decode time
	Attainment Attainment
	// Goodput bounds, per second of the window's observed time; -1 where
	// unknown (tokens from histograms).
	GoodputRPSLo, GoodputRPSHi, GoodputTPSLo, GoodputTPSHi float64
	// Queue, prefill and decode means in seconds (-1: unknown).
	MeanQueue, MeanPrefill, MeanDecode float64
	// Reason says why histograms the engine has gave no number in the
	// window (a counter reset, buckets that changed, counters in doubt).
	Reason string
	// TTFTBasis, from per-request lines with a TTFT, is from when it
	// counts: the narrowest basis of the window's requests
	// (sample.TTFTBasis; "" from histograms, whose engines count from
	// the request's arrival).
	TTFTBasis string
}

// MissPhase names the phase to blame for the objectives missed (MissPhase).
func (s Summary) MissPhase() string {
	return MissPhase(s.Attainment, s.MeanQueue, s.MeanPrefill, s.MeanDecode)
}

// Summarize derives what one user felt in a window from what the joiner
// counted, against objective o, over secs observed seconds. Per-request
// lines win over histograms where a window has both.
func Summarize(l window.Latency, o Objective, secs float64) Summary {
	if len(l.Requests) == 0 && l.Unkept == 0 && !anyHist(l) {
		return Summary{} // nothing said: no work, no allocation
	}
	s := Summary{MeanQueue: math.NaN(), MeanPrefill: math.NaN(), MeanDecode: math.NaN()}
	switch {
	case len(l.Requests) > 0:
		s.fromRequests(l.Requests, o)
	case l.Unkept > 0 && !anyHist(l):
		s.unkept(l.Unkept)
	default:
		s.fromHistograms(l, o)
	}
	if s.Source == "" || !s.says() {
		// A histogram with nothing in it to say (a page of only +Inf
		// buckets): no latency_source without a latency.
		return Summary{}
	}
	if s.Attainment.OK {
		s.GoodputRPSLo, s.GoodputRPSHi, s.GoodputTPSLo, s.GoodputTPSHi = s.Attainment.Goodput(secs)
	} else {
		s.GoodputRPSLo, s.GoodputRPSHi, s.GoodputTPSLo, s.GoodputTPSHi = -1, -1, -1, -1
	}
	// Unknown is -1 in a summary, never NaN: windows compare equal.
	for _, v := range []*float64{&s.GoodputRPSLo, &s.GoodputRPSHi, &s.GoodputTPSLo, &s.GoodputTPSHi,
		&s.MeanQueue, &s.MeanPrefill, &s.MeanDecode, &s.Attainment.GoodTokensLo, &s.Attainment.GoodTokensHi} {
		if math.IsNaN(*v) {
			*v = -1
		}
	}
	return s
}

// says tells whether any value of s is known or bounded.
func (s *Summary) says() bool {
	if s.Attainment.OK || s.Reason != "" {
		return true
	}
	for _, qs := range [][]Quantile{s.TTFT[:], s.ITL[:], s.E2E[:], s.Queue[:], s.PerUserTPS[:]} {
		for _, q := range qs {
			if q.OK || q.Bounded {
				return true
			}
		}
	}
	return false
}

func anyHist(l window.Latency) bool {
	for _, h := range l.Hists {
		if h.OK || h.Err != "" {
			return true
		}
	}
	return false
}

func known(v float64) float64 {
	if v < 0 {
		return math.NaN()
	}
	return v
}

func mean(xs []float64) float64 {
	sum, n := 0.0, 0
	for _, x := range xs {
		if !math.IsNaN(x) {
			sum += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// unkept says why a window of more requests than the joiner keeps
// (window.MaxRequests) has no latency from their lines.
func (s *Summary) unkept(n int) {
	s.Source = SourceRequests
	s.Reason = fmt.Sprintf("%d requests ended in the window, more than the %d whose latencies are kept", n,
		window.MaxRequests)
	for _, qs := range []struct {
		q   []float64
		out []Quantile
	}{{TTFTQ[:], s.TTFT[:]}, {ITLQ[:], s.ITL[:]}, {E2EQ[:], s.E2E[:]}, {QueQ[:], s.Queue[:]}, {TPSQ[:], s.PerUserTPS[:]}} {
		for i, q := range qs.q {
			qs.out[i] = absent(q, s.Reason)
		}
	}
	s.Attainment = Attainment{Requests: float64(n), Reason: s.Reason}
}

func (s *Summary) fromRequests(rs []window.RequestTimes, o Objective) {
	s.Source = SourceRequests
	n := len(rs)
	// One array holds the five series.
	all := make([]float64, 5*n)
	ttft, tpot, e2e, queue, decode := all[:n:n], all[n:2*n:2*n], all[2*n:3*n:3*n], all[3*n:4*n:4*n], all[4*n:]
	reqs := make([]Request, n)
	basis := sample.NumTTFTBases
	for i, r := range rs {
		if r.TTFT >= 0 {
			basis = min(basis, r.TTFTBasis)
		}
		ttft[i], tpot[i], e2e[i], queue[i] = known(r.TTFT), known(r.TPOT), known(r.E2E), known(r.Queue)
		decode[i] = e2e[i] - ttft[i]
		reqs[i] = Request{TTFT: ttft[i], TPOT: tpot[i], E2E: e2e[i], OutputTokens: known(r.Tokens), Failed: r.Failed}
	}
	// One sort per series, its storage reused by the next.
	var sorted []float64
	quantiles := func(values []float64, qs []float64, out []Quantile) {
		sorted = sortKnown(values, sorted)
		for i, q := range qs {
			out[i] = fromSorted(sorted, q)
		}
	}
	quantiles(ttft, TTFTQ[:], s.TTFT[:])
	quantiles(tpot, ITLQ[:], s.ITL[:])
	// Per-user TPS is 1/TPOT of each request with a TPOT above 0: the
	// sorted TPOTs read backwards, no sort of its own (1/x never reverses
	// the order of two positive x, so the values and their order are
	// those a sort of the reciprocals gives).
	tps := make([]float64, 0, len(sorted))
	for i := len(sorted) - 1; i >= 0 && sorted[i] > 0; i-- {
		tps = append(tps, 1/sorted[i])
	}
	for i, q := range TPSQ {
		s.PerUserTPS[i] = fromSorted(tps, q)
	}
	quantiles(e2e, E2EQ[:], s.E2E[:])
	quantiles(queue, QueQ[:], s.Queue[:])
	s.Attainment = FromRequests(reqs, o)
	s.MeanQueue, s.MeanPrefill, s.MeanDecode = mean(queue), mean(ttft), mean(decode)
	if basis < sample.NumTTFTBases {
		s.TTFTBasis = basis.String()
	}
}

// histogram turns a window's growth into a Histogram, or says why not.
func histogram(h window.HistWindow) (Histogram, string) {
	switch {
	case h.Err != "":
		return Histogram{}, h.Err
	case !h.OK:
		return Histogram{}, ""
	}
	out := Histogram{Buckets: make([]Bucket, len(h.Le))}
	for i := range h.Le {
		out.Buckets[i] = Bucket{Le: h.Le[i], Count: h.Count[i]}
	}
	return out, ""
}

// absent is a quantile that cannot be had, and why.
func absent(q float64, why string) Quantile { return Quantile{Q: q, Reason: why} }

func (s *Summary) fromHistograms(l window.Latency, o Objective) {
	quant := func(kind sample.Hist, qs []float64, out []Quantile) bool {
		h, why := histogram(l.Hists[kind])
		if why != "" && s.Reason == "" {
			s.Reason = kind.String() + ": " + why
		}
		if h.Buckets == nil && why == "" {
			for i, q := range qs {
				out[i] = absent(q, "no "+kind.String()+" histogram")
			}
			return false
		}
		for i, q := range qs {
			if why != "" {
				out[i] = absent(q, why)
				continue
			}
			out[i] = FromHistogram(h, q)
		}
		return true
	}
	any := quant(sample.HistTTFT, TTFTQ[:], s.TTFT[:])
	any = quant(sample.HistITL, ITLQ[:], s.ITL[:]) || any
	any = quant(sample.HistE2E, E2EQ[:], s.E2E[:]) || any
	any = quant(sample.HistQueue, QueQ[:], s.Queue[:]) || any
	var tpot [2]Quantile
	if quant(sample.HistTPOT, []float64{0.9, 0.5}, tpot[:]) {
		any = true
		s.PerUserTPS[0], s.PerUserTPS[1] = Reciprocal(tpot[0]), Reciprocal(tpot[1])
	} else {
		s.PerUserTPS[0], s.PerUserTPS[1] = absent(0.1, tpot[0].Reason), absent(0.5, tpot[1].Reason)
	}
	if !any {
		return
	}
	s.Source = SourceHistogram
	s.Attainment = s.histAttainment(l, o)
	histMean := func(kind sample.Hist) float64 {
		h := l.Hists[kind]
		if !h.OK || !h.HasSum || h.Total() <= 0 {
			return math.NaN()
		}
		return h.Sum / h.Total()
	}
	s.MeanQueue = histMean(sample.HistQueue)
	s.MeanPrefill, s.MeanDecode = histMean(sample.HistPrefill), histMean(sample.HistDecode)
	if math.IsNaN(s.MeanPrefill) {
		// Time to first token is the queue and the prefill.
		s.MeanPrefill = histMean(sample.HistTTFT) - max(0, s.MeanQueue)
		if math.IsNaN(s.MeanQueue) {
			s.MeanPrefill = histMean(sample.HistTTFT)
		}
	}
	if math.IsNaN(s.MeanDecode) {
		s.MeanDecode = histMean(sample.HistE2E) - histMean(sample.HistTTFT)
	}
}

// histAttainment bounds the attainment from the histogram of each
// objective given: TPOT from the per-request histogram, never the per-gap
// one (a share of gaps is not a share of requests).
func (s *Summary) histAttainment(l window.Latency, o Objective) Attainment {
	if !o.Set() {
		return Attainment{Reason: "no objective set"}
	}
	var ms []Marginal
	for k, m := range []struct {
		kind sample.Hist
		d    float64
	}{{sample.HistTTFT, o.TTFT.Seconds()}, {sample.HistTPOT, o.TPOT.Seconds()}, {sample.HistE2E, o.E2E.Seconds()}} {
		if m.d <= 0 {
			continue
		}
		h, why := histogram(l.Hists[m.kind])
		if h.Buckets == nil {
			if why == "" {
				why = "no " + m.kind.String() + " histogram for its objective"
			}
			return Attainment{Reason: why}
		}
		ms = append(ms, Marginal{H: h, Objective: m.d, Kind: k})
	}
	failed := 0.0
	if l.Aborted.OK {
		failed = l.Aborted.V
	}
	return FromHistograms(ms, failed)
}
