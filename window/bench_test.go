package window_test

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/analysis"
	"github.com/tpsmon/tpsmon/internal/cpuclock"
	"github.com/tpsmon/tpsmon/sample"
	"github.com/tpsmon/tpsmon/sink"
	"github.com/tpsmon/tpsmon/window"
)

// BenchmarkWindow is one 10 s window at 1 Hz, fed and closed: a node (8
// GPUs, 2 servers), and S3's scale (64 GPUs, 16 servers of 4 GPUs each),
// where the closed window is also analysed and its points encoded as line
// protocol, as the spool writes them.
func BenchmarkWindow(b *testing.B) {
	b.Run("node", func(b *testing.B) { benchWindow(b, 8, 2, false) })
	b.Run("s3-join-and-emit", func(b *testing.B) { benchWindow(b, 64, 16, true) })
}

func benchWindow(b *testing.B, gpus, servers int, emit bool) {
	names := make([]string, servers)
	srv := make([]window.Server, servers)
	per := gpus / servers
	for s := range servers {
		names[s] = fmt.Sprintf("s%d", s)
		srv[s] = window.Server{Name: names[s], Engine: "vllm"}
		for g := s * per; g < (s+1)*per; g++ {
			srv[s].GPUs = append(srv[s].GPUs, fmt.Sprint(g))
		}
	}
	j := window.New(window.Config{Window: 10 * time.Second, Grace: 5 * time.Second, MaxGap: 2500 * time.Millisecond, Host: "n",
		Start: time.Unix(0, 0)}, srv)
	uuids := make([]string, gpus)
	for g := range uuids {
		uuids[g] = fmt.Sprintf("GPU-%d", g)
	}
	// The daemon's analysis and line protocol writer (the spool's encodes
	// alike).
	lp := sink.NewLPWriter(io.Discard)
	var facts analysis.Facts
	var analysed []analysis.Closed
	b.ReportAllocs()
	t := time.Unix(0, 0)
	start := cpuclock.Self()
	defer func() {
		cpu := cpuclock.Self() - start
		b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/window")
	}()
	for i := range b.N {
		for s := range 10 {
			now := t.Add(time.Duration(s) * time.Second)
			for g := range gpus {
				j.AddGPU(sample.GPU{Time: now, Index: g, UUID: uuids[g], UtilPct: 70, PowerW: 500, EnergyMJ: int64(i*10+s) * 500_000,
					MemUsedBytes: 70 << 30, MemTotalBytes: 80 << 30, TempC: 60, SMClockMHz: 1900,
					Has: sample.FieldUtil | sample.FieldPower | sample.FieldEnergy | sample.FieldMemory | sample.FieldTemp | sample.FieldSMClock})
			}
			for _, name := range names {
				var smp sample.Server
				smp.Time = now
				smp.SetCounter(sample.GenerationTokens, float64(i*10+s)*1000)
				smp.SetGauge(sample.Running, 16)
				j.AddServer(name, smp)
			}
		}
		t = t.Add(10 * time.Second)
		cs := j.Flush(t.Add(5 * time.Second))
		if len(cs) != 1 || len(cs[0].GPUs)+len(cs[0].Servers) != gpus+servers {
			b.Fatalf("%d windows closed, want one of %d points", len(cs), gpus+servers)
		}
		if emit {
			analysed = analysis.Append(analysed[:0], cs, &facts)
			if err := lp.WriteWindows(analysed); err != nil {
				b.Fatal(err)
			}
		}
	}
}
