package logline

import (
	"fmt"
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// statLine is one generated interval-average line: its text, and the
// rate it states.
type statLine struct {
	text string
	rate float64
}

// genStatLines makes n lines of engine ("sglang" or "vllm") whose true
// times are sub-second apart but whose stamps say only the second, as
// SGLang's "[2026-03-22 13:53:37 TP0]" and vLLM's "INFO 03-22 13:53:37" do.
// SGLang's rate is its 40 steps' tokens over the true gap, off by up to
// 30 % (the running count changes within the steps), sometimes with an
// accept length; vLLM's is any rate.
func genStatLines(rng *rand.Rand, engine string, n int) []statLine {
	t := time.Date(2026, 3, 22, 13, 53, 37, 0, time.UTC).Add(time.Duration(rng.Int63n(int64(time.Second))))
	out := make([]statLine, 0, n)
	for range n {
		gap := time.Duration((0.03 + rng.Float64()*0.9) * float64(time.Second))
		t = t.Add(gap)
		running := 1 + rng.Intn(64)
		stamp := t.Truncate(time.Second)
		switch engine {
		case "sglang":
			accept, acc := 1.0, ""
			if rng.Intn(3) == 0 {
				accept = 1 + rng.Float64()*3
				acc = fmt.Sprintf("accept len: %.2f, accept rate: 0.60, ", accept)
			}
			tokens := sglangSteps * float64(running) * accept * (0.7 + 0.6*rng.Float64())
			rate := math.Round(tokens/gap.Seconds()*100) / 100
			out = append(out, statLine{fmt.Sprintf("[%s TP0] Decode batch, #running-req: %d, #token: 4000, token usage: 0.04, %scuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0, ",
				stamp.Format("2006-01-02 15:04:05"), running, acc, rate), rate})
		case "vllm":
			rate := math.Round((1+rng.Float64()*3000)*10) / 10
			out = append(out, statLine{fmt.Sprintf("INFO %s [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: %.1f tokens/s, Running: %d reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%%, Prefix cache hit rate: 0.0%%",
				stamp.Format("01-02 15:04:05"), rate, running), rate})
		}
	}
	return out
}

// placeStat turns lines into intervals as replay does: Placer, then
// Stream.
func placeStat(t *testing.T, lines []statLine) []sample.Interval {
	t.Helper()
	p, err := NewParser("auto")
	if err != nil {
		t.Fatal(err)
	}
	p.Timestamps, p.Year = true, 2026
	var st Stream
	var ivs []sample.Interval
	pl := &Placer{P: p, Emit: func(pr Placed) {
		if iv, ok := st.Interval(pr.Record, pr.Time); ok {
			ivs = append(ivs, iv)
		}
	}}
	for _, l := range lines {
		pl.Line([]byte(l.text))
	}
	pl.Close()
	if len(ivs) != len(lines) {
		t.Fatalf("%d intervals of %d lines", len(ivs), len(lines))
	}
	return ivs
}

// stretchRate is the rate the intervals give over [a, b]: their tokens
// spread by overlap, over the time they cover, as the joiner takes them.
func stretchRate(ivs []sample.Interval, a, b time.Time) (rate, covered float64) {
	var tokens float64
	var segs [][2]time.Time
	for _, iv := range ivs {
		lo, hi := iv.Start, iv.End
		if lo.Before(a) {
			lo = a
		}
		if hi.After(b) {
			hi = b
		}
		if !hi.After(lo) || !iv.End.After(iv.Start) {
			continue
		}
		tokens += iv.Tokens * float64(hi.Sub(lo)) / float64(iv.End.Sub(iv.Start))
		segs = append(segs, [2]time.Time{lo, hi})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i][0].Before(segs[j][0]) })
	var end time.Time
	for _, s := range segs {
		if s[0].Before(end) {
			s[0] = end
		}
		if s[1].After(s[0]) {
			covered += s[1].Sub(s[0]).Seconds()
			end = s[1]
		}
	}
	if covered == 0 {
		return 0, 0
	}
	return tokens / covered, covered
}

// TestStatRateWithinStated: whatever the stamps' resolution, the rate
// over any stretch of interval-average lines is within the rates the
// lines state. Lines that share a second each taking a second counted
// that second several times (4804 tok/s from lines that all said ~1372).
func TestStatRateWithinStated(t *testing.T) {
	rng := rand.New(rand.NewSource(27))
	for i := range 300 {
		engine := []string{"sglang", "vllm"}[i%2]
		lines := genStatLines(rng, engine, 2+rng.Intn(60))
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range lines {
			lo, hi = math.Min(lo, l.rate), math.Max(hi, l.rate)
		}
		ivs := placeStat(t, lines)
		first, last := ivs[0].Start, ivs[0].End
		for _, iv := range ivs {
			if iv.Start.Before(first) {
				first = iv.Start
			}
			if iv.End.After(last) {
				last = iv.End
			}
		}
		span := last.Sub(first)
		check := func(a, b time.Time) {
			rate, covered := stretchRate(ivs, a, b)
			if covered < 1e-3 {
				return
			}
			if eps := 1e-9 * hi; rate < lo-eps || rate > hi+eps {
				t.Fatalf("%s sequence %d: rate %.2f over [%s, %s] (%.3f s covered), the lines state %.2f-%.2f; lines:\n%s",
					engine, i, rate, a.Format("15:04:05.000"), b.Format("15:04:05.000"), covered, lo, hi, joinLines(lines))
			}
		}
		check(first, last)
		for range 20 {
			a := first.Add(time.Duration(rng.Int63n(int64(span) + 1)))
			b := a.Add(time.Duration(rng.Int63n(int64(last.Sub(a)) + 1)))
			check(a, b)
		}
		// The windows of a 1 s and a 10 s grid.
		for _, w := range []time.Duration{time.Second, 10 * time.Second} {
			for a := first.Truncate(w); a.Before(last); a = a.Add(w) {
				check(a, a.Add(w))
			}
		}
	}
}

func joinLines(ls []statLine) string {
	s := ""
	for _, l := range ls {
		s += l.text + "\n"
	}
	return s
}

// TestSGLangSameSecondPlacedBySpan: SGLang lines that share a stamp
// follow each other by their own spans within it, each line's tokens its
// own (OpenClaw-RL issue 44: 240 tokens a line at ~1372 tok/s).
func TestSGLangSameSecondPlacedBySpan(t *testing.T) {
	var lines []statLine
	for i, r := range []float64{1374.02, 1374.07, 1372.59, 1372.81, 1372.00, 1371.22, 1370.83} {
		sec := 37
		if i >= 2 {
			sec = 38
		}
		lines = append(lines, statLine{fmt.Sprintf("(SGLangEngine pid=41820) [2026-03-22 13:53:%d TP0] Decode batch, #running-req: 6, #token: 42414, token usage: 0.04, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0,", sec, r), r})
	}
	ivs := placeStat(t, lines)
	var tokens float64
	for i, iv := range ivs {
		tokens += iv.Tokens
		if i > 0 && !iv.Start.Equal(ivs[i-1].End) {
			t.Errorf("line %d starts %s, the one before ended %s", i, iv.Start.Format("05.000"), ivs[i-1].End.Format("05.000"))
		}
		if sec := []int{37, 37, 38, 38, 38, 38, 38}[i]; iv.End.Second() != sec {
			t.Errorf("line %d placed at %s, outside its stamp's second :%d", i, iv.End.Format("04:05.000"), sec)
		}
	}
	if math.Abs(tokens-1680) > 1 {
		t.Errorf("tokens %.1f, the lines say 7 x 240 = 1680", tokens)
	}
}

// TestSGLangDPAttentionRanks: under DP attention each DP rank's own TP
// rank logs its batch (DP6 TP6); another TP rank of the same DP logs the
// same batch again and is not counted.
func TestSGLangDPAttentionRanks(t *testing.T) {
	p, _ := NewParser("sglang")
	line := func(tags string) string {
		return "[2025-05-31 18:31:21 " + tags + "] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0"
	}
	for _, c := range []struct {
		tags string
		want bool
	}{{"DP6 TP6", true}, {"DP6 TP7", false}, {"DP6 TP6", true}, {"DP0 TP0", true}, {"TP1", false}, {"TP0", true}, {"DP1", true}} {
		r, ok := p.Parse([]byte(line(c.tags)))
		if ok != c.want {
			t.Errorf("%s: counted %v, want %v", c.tags, ok, c.want)
		}
		if ok && c.tags[:2] == "DP" && r.Key != c.tags[:3] {
			t.Errorf("%s: key %q", c.tags, r.Key)
		}
	}
}
