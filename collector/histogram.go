package collector

import (
	"math"
	"slices"
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/tpsmon/tpsmon/sample"
)

// histRefs names, per engine, the latency histograms tpsmon reads, each
// as the family name of its _bucket, _sum and _count series, newest
// first (the first present wins). Time per output token is kept apart
// from inter-token latency: the first is one observation per request
// (its decode time over its tokens), the second one per token gap.
var histRefs = map[string][sample.NumHists][]string{
	"vllm": {
		sample.HistTTFT:    {"vllm:time_to_first_token_seconds"},
		sample.HistITL:     {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"},
		sample.HistTPOT:    {"vllm:request_time_per_output_token_seconds"},
		sample.HistE2E:     {"vllm:e2e_request_latency_seconds"},
		sample.HistQueue:   {"vllm:request_queue_time_seconds"},
		sample.HistPrefill: {"vllm:request_prefill_time_seconds"},
		sample.HistDecode:  {"vllm:request_decode_time_seconds"},
	},
	"nim": {
		sample.HistTTFT:    {"vllm:time_to_first_token_seconds", "time_to_first_token_seconds"},
		sample.HistITL:     {"vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "time_per_output_token_seconds"},
		sample.HistTPOT:    {"vllm:request_time_per_output_token_seconds"},
		sample.HistE2E:     {"vllm:e2e_request_latency_seconds", "e2e_request_latency_seconds"},
		sample.HistQueue:   {"vllm:request_queue_time_seconds", "request_queue_time_seconds"},
		sample.HistPrefill: {"vllm:request_prefill_time_seconds"},
		sample.HistDecode:  {"vllm:request_decode_time_seconds"},
	},
	// SGLang's time_per_output_token_seconds (before ~0.4.5) was per token
	// gap, as its successor inter_token_latency_seconds.
	"sglang": {
		sample.HistTTFT:  {"sglang:time_to_first_token_seconds"},
		sample.HistITL:   {"sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"},
		sample.HistE2E:   {"sglang:e2e_request_latency_seconds"},
		sample.HistQueue: {"sglang:queue_time_seconds"},
	},
	"lmdeploy": {
		sample.HistTTFT:    {"lmdeploy:time_to_first_token_seconds"},
		sample.HistITL:     {"lmdeploy:iter_token_latency"},
		sample.HistE2E:     {"lmdeploy:e2e_request_latency_seconds"},
		sample.HistQueue:   {"lmdeploy:request_queue_time_seconds"},
		sample.HistPrefill: {"lmdeploy:request_prefill_time_seconds"},
		sample.HistDecode:  {"lmdeploy:request_decode_time_seconds"},
	},
	"trtllm": {
		sample.HistTTFT:  {"trtllm_time_to_first_token_seconds", "trtllm:time_to_first_token_seconds"},
		sample.HistE2E:   {"trtllm_e2e_request_latency_seconds", "trtllm:e2e_request_latency_seconds"},
		sample.HistQueue: {"trtllm_request_queue_time_seconds", "trtllm:request_queue_time_seconds"},
	},
	// TGI's mean time per token is per request but includes prefill.
	"tgi": {
		sample.HistTPOT:  {"tgi_request_mean_time_per_token_duration"},
		sample.HistE2E:   {"tgi_request_duration"},
		sample.HistQueue: {"tgi_request_queue_duration"},
	},
}

// histFamily is one histogram family's series names.
type histFamily struct{ bucket, sum, count []Ref }

// histFamilies are the names of histRefs, made once: a name made per
// lookup was an allocation per family and scrape.
var histFamilies = func() map[string][sample.NumHists][]histFamily {
	out := map[string][sample.NumHists][]histFamily{}
	for engine, refs := range histRefs {
		var fs [sample.NumHists][]histFamily
		for h, fams := range refs {
			for _, f := range fams {
				fs[h] = append(fs[h], histFamily{[]Ref{{Name: f + "_bucket"}}, []Ref{{Name: f + "_sum"}}, []Ref{{Name: f + "_count"}}})
			}
		}
		out[engine] = fs
	}
	return out
}()

// histNames returns the exposed series the dialect's histograms are read
// from.
func histNames(engine string) []string {
	var out []string
	for _, fams := range histFamilies[engine] {
		for _, f := range fams {
			out = append(out, f.bucket[0].Name, f.sum[0].Name, f.count[0].Name)
		}
	}
	return out
}

// readHists sets s's histograms from a parsed page: per family, the
// buckets of every label set but le summed by edge (data-parallel ranks
// are one server), tensor-parallel ranks other than 0 left out. A family
// whose label sets disagree on their edges is left out: no sum of
// different buckets is a histogram. With a plan (a scraper's series
// cache, values by series.pos), the choices made on the first page of a
// shape are followed on the next ones of that shape.
func (d *Dialect) readHists(p Page, s *sample.Server, plan *readPlan, values []float64) {
	fams, ok := histFamilies[d.Engine]
	if !ok {
		return
	}
	for h, fs := range fams {
		var rec *histPlan
		if plan != nil {
			rec = &plan.hists[h]
			if plan.histsReady && !rec.full {
				if rec.ok {
					s.SetHist(sample.Hist(h), rec.read(values))
				}
				continue
			}
			rec.reset()
		}
		for _, f := range fs {
			if hist, ok := d.histogram(p, f, rec); ok {
				s.SetHist(sample.Hist(h), hist)
				break
			}
		}
	}
	if plan != nil {
		plan.histsReady = true
	}
}

// histPlan is what readHists chose for one histogram on a page of a
// plan's shape: its edges and, for each, the positions of the bucket
// series summed (one per label set, in page order), and the _sum's. At a
// scrape a second, grouping the buckets by their labels and sorting them
// was most of a histogram's reading (bench S1).
type histPlan struct {
	ok   bool
	full bool // the choice hung on values (a _count standing for +Inf): read in full each time
	le   []float64
	sets int
	pos  []int32 // bucket j of label set k at pos[j*sets+k]
	sum  []int32
	// hasSum: the page has a _sum (else Sum is NaN).
	hasSum bool
}

func (hp *histPlan) reset() {
	*hp = histPlan{le: hp.le[:0], pos: hp.pos[:0], sum: hp.sum[:0]}
}

// read is the histogram at the plan's positions of values.
func (hp *histPlan) read(values []float64) sample.Histogram {
	out := sample.Histogram{Buckets: make([]sample.HistBucket, len(hp.le)), Sum: math.NaN()}
	for j, le := range hp.le {
		at := hp.pos[j*hp.sets : (j+1)*hp.sets]
		c := values[at[0]]
		for _, i := range at[1:] {
			c += values[i]
		}
		out.Buckets[j] = sample.HistBucket{Le: le, Count: c}
	}
	if hp.hasSum {
		var sum float64
		for _, i := range hp.sum {
			sum += values[i]
		}
		out.Sum = sum
	}
	return out
}

// edge is one bucket series of a label set: its edge, count and position.
type edge struct {
	le, count float64
	pos       int32
}

// histogram reads one family's buckets and sum from p, and notes in rec
// (when not nil) where they were.
func (d *Dialect) histogram(p Page, family histFamily, rec *histPlan) (sample.Histogram, bool) {
	ss := p[family.bucket[0].Name]
	if len(ss) == 0 {
		return sample.Histogram{}, false
	}
	// Group by the labels but le, in page order: a page prints a label
	// set's buckets together, so the last set is asked first. A cached
	// series carries its edge and the rest of its labels worked out.
	type set struct {
		first series
		edges []edge
	}
	var sets []set
	last := -1
	for _, sr := range ss {
		if d.SingleRank != "" {
			if rank, ok := sr.labels[d.SingleRank]; ok && rank != "0" {
				continue
			}
		}
		le, ok := leOf(sr)
		if !ok {
			return sample.Histogram{}, false
		}
		if last < 0 || !sameSet(sets[last].first, sr) {
			last = -1
			for i := range sets {
				if sameSet(sets[i].first, sr) {
					last = i
					break
				}
			}
			if last < 0 {
				// One label set is the usual page: its buckets are all of
				// the family's series.
				sets = append(sets, set{first: sr, edges: make([]edge, 0, len(ss)+1)})
				last = len(sets) - 1
			}
		}
		sets[last].edges = append(sets[last].edges, edge{le, sr.value, sr.pos})
	}
	if len(sets) == 0 {
		return sample.Histogram{}, false
	}
	for _, st := range sets {
		if !slices.IsSortedFunc(st.edges, byLe) {
			slices.SortFunc(st.edges, byLe)
		}
		if len(st.edges) != len(sets[0].edges) {
			return sample.Histogram{}, false
		}
		for j, e := range st.edges {
			if e.le != sets[0].edges[j].le {
				return sample.Histogram{}, false
			}
		}
	}
	out := sample.Histogram{Buckets: make([]sample.HistBucket, len(sets[0].edges), len(sets[0].edges)+1)}
	for j, e := range sets[0].edges {
		c := e.count
		for _, st := range sets[1:] {
			c += st.edges[j].count
		}
		out.Buckets[j] = sample.HistBucket{Le: e.le, Count: c}
	}
	if n := len(out.Buckets); !math.IsInf(out.Buckets[n-1].Le, 1) {
		// An excerpt without TYPE lines, or cut before its +Inf bucket:
		// the count is every observation, as expfmt takes it. Whether it
		// stands for +Inf hangs on the values: no plan follows it.
		if rec != nil {
			rec.full = true
		}
		if c, _, ok := d.pick(p, family.count, false, nil); ok && c >= out.Buckets[n-1].Count {
			out.Buckets = append(out.Buckets, sample.HistBucket{Le: math.Inf(1), Count: c})
		}
	}
	if !math.IsInf(out.Buckets[len(out.Buckets)-1].Le, 1) {
		return sample.Histogram{}, false
	}
	out.Sum = math.NaN()
	var sumAt *[]int32
	if rec != nil {
		sumAt = &rec.sum
	}
	if sum, _, ok := d.pick(p, family.sum, false, sumAt); ok {
		out.Sum = sum
		if rec != nil {
			rec.hasSum = true
		}
	}
	if rec != nil {
		rec.ok, rec.sets = true, len(sets)
		for j, e := range sets[0].edges {
			rec.le = append(rec.le, e.le)
			for _, st := range sets {
				rec.pos = append(rec.pos, st.edges[j].pos)
			}
		}
	}
	return out, true
}

// leOf is a bucket series' edge.
func leOf(s series) (float64, bool) {
	if s.bucket != nil {
		return s.bucket.le, s.bucket.leOK
	}
	v, err := strconv.ParseFloat(s.labels["le"], 64)
	return v, err == nil
}

// sameSet tells whether two bucket series are of one label set.
func sameSet(a, b series) bool {
	if a.bucket != nil && b.bucket != nil {
		return a.bucket.others == b.bucket.others
	}
	return sameBut(a.labels, b.labels, "le")
}

// sameBut tells whether two label sets are equal but for label skip.
func sameBut(a, b map[string]string, skip string) bool {
	n := 0
	for k, v := range a {
		if k == skip {
			continue
		}
		if w, ok := b[k]; !ok || w != v {
			return false
		}
		n++
	}
	_, sa := a[skip]
	_, sb := b[skip]
	return len(b)-boolInt(sb) == n && len(a)-boolInt(sa) == n
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func byLe(a, b edge) int {
	switch {
	case a.le < b.le:
		return -1
	case a.le > b.le:
		return 1
	}
	return 0
}

// addBuckets adds a typed histogram's buckets to a page as the untyped
// name_bucket series (le a label) that pages without TYPE lines give, and
// its +Inf bucket, which expfmt keeps only as the count.
func addBuckets(p Page, name string, labels map[string]string, h *dto.Histogram) {
	with := func(le float64) map[string]string {
		l := make(map[string]string, len(labels)+1)
		for k, v := range labels {
			l[k] = v
		}
		l["le"] = strconv.FormatFloat(le, 'g', -1, 64)
		return l
	}
	inf := false
	for _, b := range h.GetBucket() {
		le := b.GetUpperBound()
		inf = inf || math.IsInf(le, 1)
		p[name+"_bucket"] = append(p[name+"_bucket"], series{labels: with(le), value: float64(b.GetCumulativeCount())})
	}
	if !inf && len(h.GetBucket()) > 0 {
		p[name+"_bucket"] = append(p[name+"_bucket"], series{labels: with(math.Inf(1)), value: float64(h.GetSampleCount())})
	}
}
