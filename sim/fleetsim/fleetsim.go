// Package fleetsim simulates a fleet's tpsmon points, for the report's
// screenshots and the scale benchmark: raw windows as the daemon writes
// them, and hourly or daily rollups as `tpsmon rollup` writes them,
// computed from the same per-minute model so both agree (the curve
// rollup too: its histograms of the minutes).
package fleetsim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/influxdata/influxdb-client-go/v2/api/write"

	"github.com/tpsmon/tpsmon/analysis/curve"
	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/schema"
)

// Fleet is Hosts hosts of GPUs GPUs each. Each host runs one server on
// its GPUs but the last Unused ones of every fifth host.
type Fleet struct {
	Hosts, GPUs int
	Unused      int
	Model       string // GPU model (name tag)
}

// Host names host i.
func Host(i int) string { return fmt.Sprintf("node-%03d", i) }

// minute is what the model says of host h's server over one minute.
type minute struct {
	state       string
	tps, util   float64
	running     float64
	waiting     float64
	powerPerGPU float64
	// ceiling and mbu: the decode ceiling's, 0 where it has none.
	ceiling, mbu float64
}

// latency is what a user feels in a minute of m (running > 0): first
// tokens wait behind the queue and the batch, steps slow down as it grows
// (so an hour's windows differ, and their median is not their mean).
func (m minute) latency() map[string]float64 {
	ttft := 0.1 * (1 + m.waiting) * (1 + m.running/48)
	itl := m.running / m.tps * (1 + m.running/96)
	att := 1 / (1 + 0.1*m.waiting)
	return map[string]float64{
		schema.FieldTTFTP50: ttft, schema.FieldTTFTP90: 2 * ttft, schema.FieldTTFTP99: 4 * ttft,
		schema.FieldITLP50: itl, schema.FieldITLP90: 1.3 * itl, schema.FieldITLP99: 2 * itl,
		schema.FieldSLOAttainmentLo: 0.95 * att, schema.FieldSLOAttainmentHi: att, schema.FieldGoodputRPSLo: 0.95 * att * m.running,
	}
}

// latencyRollup puts the latency rollup's aggregates (schema.LatencyRollup)
// of a period's minutes' values (by field; latency_source as 1s) into fs.
func latencyRollup(fs map[string]any, vals map[string][]float64) {
	for _, a := range schema.LatencyRollup {
		v := vals[a.Field]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		switch a.Fn {
		case "count":
			fs[a.As] = float64(len(v))
		case "sum":
			var t float64
			for _, x := range v {
				t += x
			}
			fs[a.As] = t
		case "min":
			fs[a.As] = v[0]
		case "max":
			fs[a.As] = v[len(v)-1]
		case "median": // InfluxQL's: the mean of the middle two of an even count
			fs[a.As] = (v[(len(v)-1)/2] + v[len(v)/2]) / 2
		}
	}
}

// demand is host h's load at t: a daily wave, hosts offset and scaled,
// with 2-minute phases so a short range shows its steps.
func (f Fleet) at(h int, t time.Time) minute {
	hour := float64(t.Hour()) + float64(t.Minute())/60
	d := 0.55 + 0.4*math.Sin(2*math.Pi*(hour-9-float64(h%5))/24)
	d *= []float64{1, 0.25, 0.7}[(t.Minute()/2)%3]
	d *= 0.6 + 0.4*float64(h%7)/6
	if h%9 == 4 && t.YearDay()%7 < 2 {
		d = 0 // some hosts idle two days a week
	}
	m := minute{tps: 2500 * d * float64(f.used(h)), util: math.Min(99, 100*d), running: 48 * d}
	switch {
	case d == 0:
		m.state, m.util = schema.StateIdle, 0.5
	case h%11 == 3:
		m.state, m.waiting, m.util = schema.StateQueueBound, 6, 35
	case d < 0.35:
		m.state = schema.StateUnderutilized
	case d > 0.85:
		m.state, m.waiting = schema.StateSaturated, 4*d
	default:
		m.state = schema.StateOK
	}
	m.powerPerGPU = 90 + 6*m.util
	if m.running > 0 && h%4 != 1 {
		// The decode ceiling grows with the batch; every fourth host has
		// no model facts, so none.
		m.ceiling = float64(f.used(h)) * (800 + 50*m.running)
		m.mbu = 0.85 * m.tps / m.ceiling
	}
	return m
}

// fields puts a rollup's decode-ceiling fields of the minutes' sums into
// fs (package rollup's names and weighting).
func (c ceilingSums) fields(fs map[string]any, gpus float64) {
	if c.secs == 0 {
		return
	}
	fs[schema.FieldMBU], fs[schema.FieldMBUSeconds] = c.mbu/c.secs, c.secs
	fs[schema.FieldCeilingTPS], fs[schema.FieldCeilingSeconds] = c.ceiling/c.secs, c.secs
	fs[schema.FieldCeilingWindows] = int64(c.secs / 60)
	fs[schema.FieldLostTokens], fs[schema.FieldAboveCeilingTokens] = c.lost, c.above
	fs[schema.FieldLostSeconds], fs[schema.FieldLostGPUSeconds] = c.lostSecs, c.lostSecs*gpus
}

// ceilingSums sums minutes with a ceiling.
type ceilingSums struct{ secs, mbu, ceiling, lost, above, lostSecs float64 }

func (c *ceilingSums) add(m minute, secs float64) {
	if m.ceiling == 0 {
		return
	}
	c.secs += secs
	c.mbu += m.mbu * secs
	c.ceiling += m.ceiling * secs
	c.lost += max(0, m.ceiling-m.tps) * secs
	c.above += max(0, m.tps-m.ceiling) * secs
	c.lostSecs += max(0, 1-m.tps/m.ceiling) * secs
}

func (f Fleet) used(h int) int {
	if h%5 == 0 {
		return f.GPUs - f.Unused
	}
	return f.GPUs
}

func (f Fleet) gpus(h int) string {
	var s []string
	for g := 0; g < f.used(h); g++ {
		s = append(s, strconv.Itoa(g))
	}
	return strings.Join(s, ",")
}

func uuid(h, g int) string { return fmt.Sprintf("GPU-%08x-%04x", h, g) }

// Raw emits the windows of [from, to) of length w (at most a minute).
func (f Fleet) Raw(from, to time.Time, w time.Duration, emit func(*write.Point) error) error {
	for t := from; t.Before(to); t = t.Add(w) {
		for h := 0; h < f.Hosts; h++ {
			m := f.at(h, t)
			n := float64(f.used(h))
			host := Host(h)
			tokens := int64(m.tps * w.Seconds())
			fs := map[string]any{
				schema.FieldTokens: tokens, schema.FieldSystemTPS: m.tps, schema.FieldRunning: m.running, schema.FieldWaiting: m.waiting,
				schema.FieldGPUUtil: m.util, schema.FieldEnergyJ: m.powerPerGPU * n * w.Seconds(), schema.FieldPowerW: m.powerPerGPU * n,
				schema.FieldState: m.state, schema.FieldCoverage: 1.0, schema.FieldWindowS: w.Seconds(), schema.FieldTPSPerGPU: m.tps / n,
			}
			if m.ceiling > 0 {
				fs[schema.FieldCeilingTPS], fs[schema.FieldMBU] = m.ceiling, m.mbu
			}
			if m.running > 0 {
				fs[schema.FieldPerUserTPS] = m.tps / m.running
				fs[schema.FieldLatencySource] = "histogram"
				for k, v := range m.latency() {
					fs[k] = v
				}
			}
			if err := emit(write.NewPoint(schema.Server, map[string]string{schema.TagHost: host, schema.TagServer: "llm", schema.TagGPUs: f.gpus(h), schema.TagEngine: engine.VLLM}, fs, t)); err != nil {
				return err
			}
			for g := 0; g < f.GPUs; g++ {
				util, power, server := m.util, m.powerPerGPU, "llm"
				if g >= f.used(h) {
					util, power, server = 0, 60, ""
				}
				gf := map[string]any{
					schema.FieldUtil: util, schema.FieldUtilMax: util, schema.FieldPowerW: power, schema.FieldEnergyJ: power * w.Seconds(),
					schema.FieldTempC: 35 + util/3, schema.FieldSMClockMHz: 1980.0, schema.FieldSMActive: util * 0.8, schema.FieldMemUtil: util / 2,
					schema.FieldCoverage: 1.0, schema.FieldWindowS: w.Seconds(), schema.FieldSamples: int64(w.Seconds()),
					schema.FieldMemUsedBytes: int64(20e9 + util*5e8), schema.FieldMemTotalBytes: int64(80e9), schema.FieldThrottle: int64(0),
				}
				if util > 75 {
					gf[schema.FieldThrottle] = int64(4) // power cap
				}
				if err := emit(write.NewPoint(schema.GPU, map[string]string{schema.TagHost: host, schema.TagGPU: strconv.Itoa(g), schema.TagUUID: uuid(h, g), schema.TagName: f.Model, schema.TagServer: server}, gf, t)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Rollups emits the rollup points of [from, to) for periods of every (an
// hour or a day), suffix "_1h" or "_1d": what `tpsmon rollup` writes for
// one-minute windows of the same model.
func (f Fleet) Rollups(from, to time.Time, every time.Duration, suffix string, emit func(*write.Point) error) error {
	for p := from; p.Before(to); p = p.Add(every) {
		cells := curve.NewCells(every)
		for h := 0; h < f.Hosts; h++ {
			n := float64(f.used(h))
			tags := map[string]string{schema.TagHost: Host(h), schema.TagServer: "llm", schema.TagGPUs: f.gpus(h), schema.TagEngine: engine.VLLM}
			var tokens, energy, tps, util, running, waiting, power float64
			states := map[string]float64{}
			mins, low := 0.0, 0.0
			var ceil ceilingSums
			lat := map[string][]float64{}
			for t := p; t.Before(p.Add(every)); t = t.Add(time.Minute) {
				m := f.at(h, t)
				ceil.add(m, 60)
				tokens += float64(int64(m.tps * 60))
				energy += m.powerPerGPU * n * 60
				tps += m.tps
				util += m.util
				running += m.running
				waiting += m.waiting
				power += m.powerPerGPU
				states[m.state]++
				mins++
				if m.util < schema.IdleGPUUtil {
					low++
				}
				w := curve.Window{Key: curve.KeyOf(tags), Seconds: 60, GPUs: int(n), Running: curve.Some(m.running),
					SystemTPS: curve.Some(m.tps), Tokens: curve.Some(float64(int64(m.tps * 60)))}
				if m.running > 0 {
					w.PerUserTPS = curve.Some(m.tps / m.running)
					lat[schema.FieldLatencySource] = append(lat[schema.FieldLatencySource], 1)
					for k, v := range m.latency() {
						lat[k] = append(lat[k], v)
					}
				}
				cells.Add(tags, t, w)
			}
			fs := map[string]any{
				schema.FieldTokens: tokens, schema.FieldEnergyJ: energy, schema.FieldSystemTPS: tps / mins, schema.FieldGPUUtil: util / mins,
				schema.FieldRunning: running / mins, schema.FieldWaiting: waiting / mins, schema.FieldPowerW: power * n / mins,
				schema.FieldTPSPerGPU: tps / mins / n,
				schema.FieldWindows:   int64(mins), schema.FieldSeconds: mins * 60, schema.FieldGPUSeconds: mins * 60 * n,
			}
			ceil.fields(fs, n)
			latencyRollup(fs, lat)
			for st, c := range states {
				fs[schema.RollupField(st, schema.FieldWindows)] = int64(c)
				fs[schema.RollupField(st, schema.FieldSeconds)] = c * 60
				fs[schema.RollupField(st, schema.FieldGPUSeconds)] = c * 60 * n
			}
			host := Host(h)
			if err := emit(write.NewPoint(schema.Server+suffix, map[string]string{schema.TagHost: host, schema.TagServer: "llm", schema.TagGPUs: f.gpus(h), schema.TagEngine: engine.VLLM}, fs, p)); err != nil {
				return err
			}
			for g := 0; g < f.GPUs; g++ {
				server := "llm"
				u, pw, idle := util/mins, power/mins, low
				if g >= f.used(h) {
					server, u, pw, idle = "", 0, 60, mins
				}
				gf := map[string]any{
					schema.FieldUtil: u, schema.FieldUtilMax: u, schema.FieldPowerW: pw, schema.FieldEnergyJ: pw * mins * 60,
					schema.FieldTempC: 35 + u/3, schema.FieldSMClockMHz: 1980.0,
					schema.FieldWindows: int64(mins), schema.FieldSeconds: mins * 60, schema.FieldGPUSeconds: mins * 60,
				}
				if idle > 0 {
					// GPUs under 5 % utilization, as package rollup counts them.
					gf[schema.RollupField(schema.IdleGPU, schema.FieldWindows)] = int64(idle)
					gf[schema.RollupField(schema.IdleGPU, schema.FieldSeconds)] = idle * 60
					gf[schema.RollupField(schema.IdleGPU, schema.FieldGPUSeconds)] = idle * 60
				}
				if err := emit(write.NewPoint(schema.GPU+suffix, map[string]string{schema.TagHost: host, schema.TagGPU: strconv.Itoa(g), schema.TagUUID: uuid(h, g), schema.TagName: f.Model, schema.TagServer: server}, gf, p)); err != nil {
					return err
				}
			}
		}
		// The curve rollup: the minutes' histogram per concurrency bin.
		err := cells.Each(func(tags map[string]string, period time.Time, fields map[string]any) error {
			return emit(write.NewPoint(schema.Curve+suffix, tags, fields, period))
		})
		if err != nil {
			return err
		}
	}
	return nil
}
