package report

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Report is what a time range of the fleet says.
type Report struct {
	From     time.Time      `json:"from"`
	To       time.Time      `json:"to"`
	Host     string         `json:"host,omitempty"`
	Server   string         `json:"server,omitempty"`
	Window   string         `json:"window"`
	Findings []string       `json:"findings"`
	Waste    []StateHours   `json:"gpu_hours_by_state"`
	Servers  []ServerReport `json:"servers"`
	GPUs     []GPUReport    `json:"gpus"`
}

// StateHours is the GPU time spent in one state, and who spent it.
type StateHours struct {
	State    string   `json:"state"`
	GPUHours float64  `json:"gpu_hours"`
	By       []string `json:"by"` // "host/server: hours", most first
}

// ServerReport is one server over the range.
type ServerReport struct {
	Host             string             `json:"host"`
	Server           string             `json:"server"`
	TokensPerJoule   *float64           `json:"tokens_per_joule,omitempty"`
	TokensPerGPUHour *float64           `json:"tokens_per_gpu_hour,omitempty"`
	Tokens           float64            `json:"tokens"`
	StateShare       map[string]float64 `json:"state_share"`
	Series           []Point            `json:"series"`
}

// Point is one interval of a server's series; negative is absent.
type Point struct {
	Time       time.Time `json:"time"`
	SystemTPS  float64   `json:"system_tps"`
	PerUserTPS float64   `json:"per_user_tps"`
	Running    float64   `json:"running"`
	GPUUtil    float64   `json:"gpu_util"`
}

// GPUReport is one GPU over the range.
type GPUReport struct {
	Host      string  `json:"host"`
	GPU       string  `json:"gpu"`
	Server    string  `json:"server"`
	IdleShare float64 `json:"idle_share"` // of windows with util < 5 %
	MeanUtil  float64 `json:"mean_util"`
	Windows   int     `json:"windows"`
}

// querier runs InfluxQL.
type querier interface {
	Query(ctx context.Context, q string) ([]Series, error)
}

// Build reads the range of f and draws the findings. window is the
// windows' length, which turns window counts into GPU-hours.
func Build(ctx context.Context, c querier, f Filter, window time.Duration) (*Report, error) {
	r := &Report{From: f.From, To: f.To, Host: f.Host, Server: f.Server, Window: window.String()}
	run := func(q Query, state string) ([]Series, error) {
		text, err := f.Render(q, state)
		if err != nil {
			return nil, err
		}
		s, err := c.Query(ctx, text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.Name, err)
		}
		return s, nil
	}
	servers := map[string]*ServerReport{}
	server := func(tags map[string]string) *ServerReport {
		k := tags["host"] + "/" + tags["server"]
		s, ok := servers[k]
		if !ok {
			s = &ServerReport{Host: tags["host"], Server: tags["server"], StateShare: map[string]float64{}}
			servers[k] = s
		}
		return s
	}
	// Windows per state and server, and the GPU-hours they held.
	total := map[string]float64{}
	byState := map[string]map[string]float64{}
	for _, st := range States {
		series, err := run(StateWindows, st)
		if err != nil {
			return nil, err
		}
		for _, s := range series {
			for _, row := range s.Rows() {
				n, _ := num(row["windows"])
				sr := server(s.Tags)
				sr.StateShare[st] += n
				total[sr.Host+"/"+sr.Server] += n
				gpus := 0
				if g := s.Tags["gpus"]; g != "" {
					gpus = len(strings.Split(g, ","))
				}
				h := n * window.Hours() * float64(gpus)
				if byState[st] == nil {
					byState[st] = map[string]float64{}
				}
				byState[st][sr.Host+"/"+sr.Server] += h
			}
		}
	}
	for k, s := range servers {
		for st := range s.StateShare {
			if total[k] > 0 {
				s.StateShare[st] /= total[k]
			}
		}
	}
	for _, st := range States {
		sh := StateHours{State: st}
		type kv struct {
			k string
			v float64
		}
		var by []kv
		for k, v := range byState[st] {
			sh.GPUHours += v
			by = append(by, kv{k, v})
		}
		sort.Slice(by, func(a, b int) bool { return by[a].v > by[b].v || by[a].v == by[b].v && by[a].k < by[b].k })
		for _, x := range by {
			sh.By = append(sh.By, fmt.Sprintf("%s: %.1f h", x.k, x.v))
		}
		r.Waste = append(r.Waste, sh)
	}

	if series, err := run(TokensPerJoule, ""); err != nil {
		return nil, err
	} else {
		for _, s := range series {
			for _, row := range s.Rows() {
				if v, ok := num(row["tokens_per_joule"]); ok {
					server(s.Tags).TokensPerJoule = &v
				}
			}
		}
	}
	if series, err := run(Ranking, ""); err != nil {
		return nil, err
	} else {
		for _, s := range series {
			for _, row := range s.Rows() {
				sr := server(s.Tags)
				if v, ok := num(row["tokens_per_gpu_hour"]); ok {
					sr.TokensPerGPUHour = &v
				}
				sr.Tokens, _ = num(row["tokens"])
			}
		}
	}
	if series, err := run(ServerSeries, ""); err != nil {
		return nil, err
	} else {
		for _, s := range series {
			sr := server(s.Tags)
			for _, row := range s.Rows() {
				t, _ := num(row["time"])
				p := Point{Time: time.Unix(int64(t), 0).UTC(), SystemTPS: -1, PerUserTPS: -1, Running: -1, GPUUtil: -1}
				for col, dst := range map[string]*float64{"system_tps": &p.SystemTPS, "per_user_tps": &p.PerUserTPS, "running": &p.Running, "gpu_util": &p.GPUUtil} {
					if v, ok := num(row[col]); ok {
						*dst = v
					}
				}
				sr.Series = append(sr.Series, p)
			}
		}
	}
	// GPUs: how often each was idle, and whom it served.
	gpus := map[string]*GPUReport{}
	gpu := func(tags map[string]string) *GPUReport {
		k := tags["host"] + "/" + tags["gpu"] + "/" + tags["server"]
		g, ok := gpus[k]
		if !ok {
			g = &GPUReport{Host: tags["host"], GPU: tags["gpu"], Server: tags["server"]}
			gpus[k] = g
		}
		return g
	}
	if series, err := run(GPUWindows, ""); err != nil {
		return nil, err
	} else {
		for _, s := range series {
			for _, row := range s.Rows() {
				g := gpu(s.Tags)
				n, _ := num(row["windows"])
				g.Windows = int(n)
				g.MeanUtil, _ = num(row["util"])
			}
		}
	}
	if series, err := run(GPUIdle, ""); err != nil {
		return nil, err
	} else {
		for _, s := range series {
			for _, row := range s.Rows() {
				g := gpu(s.Tags)
				n, _ := num(row["idle_windows"])
				if g.Windows > 0 {
					g.IdleShare = n / float64(g.Windows)
				}
			}
		}
	}

	for _, s := range servers {
		r.Servers = append(r.Servers, *s)
	}
	sort.Slice(r.Servers, func(a, b int) bool {
		return r.Servers[a].Host+"/"+r.Servers[a].Server < r.Servers[b].Host+"/"+r.Servers[b].Server
	})
	for _, g := range gpus {
		r.GPUs = append(r.GPUs, *g)
	}
	sort.Slice(r.GPUs, func(a, b int) bool {
		if r.GPUs[a].Host != r.GPUs[b].Host {
			return r.GPUs[a].Host < r.GPUs[b].Host
		}
		return r.GPUs[a].GPU < r.GPUs[b].GPU
	})
	r.Findings = findings(r)
	return r, nil
}

var stateWhy = map[string]string{
	"down":          "it could not be read",
	"idle":          "no tokens and nothing running",
	"kv_bound":      "requests waited or were preempted with the KV cache full",
	"queue_bound":   "requests waited while the GPU was mostly idle: the scheduler, CPU or a batch limit held it back",
	"underutilized": "tokens flowed, nothing waited, and the GPU was mostly idle: too little demand for this hardware",
	"saturated":     "the GPU was busy and requests still waited: more hardware would serve more",
}

func pct(v float64) int { return int(math.Round(100 * v)) }

func findings(r *Report) []string {
	var out []string
	for _, g := range r.GPUs {
		if g.Windows == 0 || g.IdleShare < 0.5 {
			continue
		}
		who := "no server uses it"
		if g.Server != "" {
			who = "it serves " + g.Server
		}
		out = append(out, fmt.Sprintf("gpu %s on %s was idle %d%% of the time; %s", g.GPU, g.Host, pct(g.IdleShare), who))
	}
	for _, s := range r.Servers {
		worst, share := "", 0.0
		for _, st := range States {
			if st != "ok" && s.StateShare[st] > share {
				worst, share = st, s.StateShare[st]
			}
		}
		if share >= 0.25 {
			out = append(out, fmt.Sprintf("server %s on %s was %s %d%% of the time: %s", s.Server, s.Host, worst, pct(share), stateWhy[worst]))
		}
	}
	var ranked []ServerReport
	for _, s := range r.Servers {
		if s.TokensPerGPUHour != nil {
			ranked = append(ranked, s)
		}
	}
	sort.Slice(ranked, func(a, b int) bool { return *ranked[a].TokensPerGPUHour < *ranked[b].TokensPerGPUHour })
	if len(ranked) > 1 {
		lo, hi := ranked[0], ranked[len(ranked)-1]
		out = append(out, fmt.Sprintf("lowest tokens per GPU-hour: %s on %s with %.0f, against %.0f for %s on %s",
			lo.Server, lo.Host, *lo.TokensPerGPUHour, *hi.TokensPerGPUHour, hi.Server, hi.Host))
	}
	if len(out) == 0 {
		out = append(out, "no waste found in this range")
	}
	return out
}
