package agent

import (
	"bytes"
	"sync"
	"time"

	"github.com/tpsmon/tpsmon/collector"
	"github.com/tpsmon/tpsmon/collector/logline"
	"github.com/tpsmon/tpsmon/collector/tail"
	"github.com/tpsmon/tpsmon/daemon/config"
	"github.com/tpsmon/tpsmon/sample"
)

// logMsg is what a server's log said: the intervals of its throughput
// lines, the engine, model or engine version it named, that the log was
// readable (watch), or intervals and watch together, with the position
// reached.
type logMsg struct {
	server string
	engine string
	model  string // the log named the model
	// version is the engine version its start-up lines stated.
	version string
	ivs     *[]logInterval
	watch   time.Time
	pos     tail.Position
}

// logInterval is one throughput line's interval and the engine whose
// line it was.
type logInterval struct {
	engine string
	iv     sample.Interval
}

// maxLogBatch bounds the intervals handed over in one message: a read of
// short lines holds thousands. It also bounds what the channel holds while
// the main loop lags: 512 a message raised S2's peak RSS from 27 to 32 MiB,
// 128 left it at 28 at the same CPU.
const maxLogBatch = 128

// logBatches recycles the slices of logMsg.ivs: a busy log hands one
// over per read.
var logBatches = sync.Pool{New: func() any {
	b := make([]logInterval, 0, maxLogBatch)
	return &b
}}

func (m *logMsg) apply(l *loop) {
	if m.ivs != nil {
		engine := ""
		for i := range *m.ivs {
			li := &(*m.ivs)[i]
			if li.engine != engine && li.engine != "" {
				l.j.NameEngine(m.server, li.engine)
				engine = li.engine
			}
			l.j.AddLog(m.server, li.iv)
		}
		*m.ivs = (*m.ivs)[:0]
		logBatches.Put(m.ivs)
	}
	if m.engine != "" || m.model != "" || m.version != "" {
		l.j.NameEngine(m.server, m.engine)
		l.j.NameModel(m.server, m.model)
		l.j.NameVersion(m.server, m.version)
	}
	if !m.watch.IsZero() {
		// After the intervals it carries: the log was read up to watch.
		l.j.Watch(m.server, m.watch)
	}
	if m.pos != (tail.Position{}) {
		l.logPos[m.server], l.logDirty[m.server] = m.pos, true
	}
}

// logReader parses one server's log lines on its source's goroutine
// (the tailer or journal calls every method there) and hands the main
// loop what they said.
type logReader struct {
	p          *pipeline
	name       string
	parser     *logline.Parser
	stream     *logline.Stream
	send       func(message)
	hasMetrics bool

	id        logline.Identity
	cancelled uint64
	skipped   [logline.NumSkipReasons]uint64
	toldSkip  bool // the first line not read was logged
	// last is the position after the last complete read, read after the
	// lines read; their intervals may still wait in batch.
	last, read tail.Position
	// The intervals read between two ticks go to the main loop in one
	// message, with the tick's watch (alive): one per line cost more than
	// parsing the line, and one per read woke the main loop for each line
	// of a quiet log (S1: 3 % of the daemon's CPU). A line's time is
	// taken when it is read, so holding it to the tick moves nothing; a
	// window waits seconds for its log lines (defaultLogGrace).
	batch    *[]logInterval
	batchPos tail.Position
	// serving: a throughput line was read, so the start-up lines that
	// say the model's facts are past; lines are no longer searched for
	// them (a busy log's other lines would pay for it) until the log
	// names another engine or model (a restart).
	serving bool
	// facts are what the start-up lines of one read said of the model,
	// handed over with the read (factsSaid): a log's head says the model,
	// its weights and its KV capacity in one message, so the daemon says
	// the ceiling's source once, not once a line.
	facts     collector.EngineFacts
	factsSaid bool
}

// newLogReader is the reader of server s's log lines, which hands what
// they said to send.
func (p *pipeline) newLogReader(s config.ServerConfig, send func(message)) (*logReader, error) {
	parser, err := logline.NewParser(s.Engine)
	if err != nil {
		return nil, err
	}
	name := s.Name
	r := &logReader{p: p, name: name, parser: parser, send: send, hasMetrics: s.MetricsURL != "",
		stream: &logline.Stream{Discarded: func(d sample.Discard) { p.metrics.discards.Add(name, d) }}}
	r.stream.Hole = r.hole
	return r, nil
}

// hole hands on, in its place among the intervals, the stretch a refused
// line spoke for: the joiner takes it out of the windows' coverage.
func (r *logReader) hole(iv sample.Interval) { r.add(logInterval{iv: iv}) }

// add queues one interval for the main loop.
func (r *logReader) add(li logInterval) {
	if r.batch == nil {
		r.batch = logBatches.Get().(*[]logInterval)
	}
	*r.batch = append(*r.batch, li)
	if len(*r.batch) >= maxLogBatch {
		r.handOver()
	}
}

// line reads one line.
func (r *logReader) line(l tail.Line) {
	r.read = l.Pos
	p, parser := r.p, r.parser
	// When the line was written: llama.cpp's own stamps where it has
	// them, else now (the tailer reads on notification).
	t := parser.LiveTime(l.Text, l.Time)
	rec, ok := parser.Parse(l.Text)
	if parser.Skipped > 0 {
		r.countSkipped()
	}
	r.named()
	if d := parser.Cancelled - r.cancelled; d > 0 && !r.hasMetrics {
		if r.cancelled == 0 {
			p.log.Warn("the server cancels requests, which print no timing line: their tokens are missing from this log's "+
				"counts (tpsmon_log_requests_unseen_total); add metrics_url to count them", "server", r.name)
		}
		p.metrics.logUnseen.Add(float64(d))
	}
	r.cancelled = parser.Cancelled
	if !ok {
		if !r.serving {
			r.factLine(l.Text)
		}
		return
	}
	r.serving = true
	r.batchPos = l.Pos // a refused line's hole is handed on too
	if iv, ok := r.stream.Interval(rec, t); ok {
		r.add(logInterval{rec.Engine, iv})
	}
}

// countSkipped counts the lines the parser did not read, by reason, and
// says the first once: a format tpsmon cannot read is never dropped
// silently.
func (r *logReader) countSkipped() {
	parser := r.parser
	for reason, n := range parser.SkippedBy {
		if d := n - r.skipped[reason]; d > 0 {
			r.p.metrics.logSkipped.WithLabelValues(r.name, logline.SkipReason(reason).String()).Add(float64(d))
			r.skipped[reason] = n
		}
	}
	if f := parser.FirstSkip; f != nil && !r.toldSkip {
		r.toldSkip = true
		// The message is replay's warning; the line is in it, cut.
		r.p.log.Warn(f.String()+"; lines like it are counted in tpsmon_log_lines_skipped_total", "server", r.name,
			"engine", f.Engine, "reason", f.Reason.String())
	}
}

// named tells the main loop when the lines named another engine or model.
func (r *logReader) named() {
	now := r.parser.Identity()
	if now == r.id {
		return
	}
	if now.Engine != r.id.Engine {
		r.p.log.Info("engine detected", "server", r.name, "engine", now.Engine, "from", "log")
	}
	if now.Model != r.id.Model {
		r.p.log.Info("model detected", "server", r.name, "model", now.Model, "from", "log")
	}
	if now.Version != r.id.Version {
		r.p.log.Info("engine version detected", "server", r.name, "engine_version", now.Version, "from", "log")
	}
	r.id = now
	r.serving = false
	r.handOver() // the lines before were read before this name
	r.send(&logMsg{server: r.name, engine: now.Engine, model: now.Model, version: now.Version})
}

// peek reads the start-up lines of a log whose reading starts at its
// end: they still name the server before the first window is written.
func (r *logReader) peek(head []byte) {
	for _, l := range bytes.Split(head, []byte("\n")) {
		r.parser.Identify(l)
		r.factLine(l)
	}
	r.named()
	r.handFacts()
}

// factLine hands on what a vLLM or SGLang start-up line says of the
// model (the path or repo id it loads, its weights per GPU, its KV
// capacity): the decode ceiling's facts where the configuration gives
// none. It reads lines only until the server serves.
func (r *logReader) factLine(text []byte) {
	if !bytes.Contains(text, []byte(" GiB")) && !bytes.Contains(text, []byte("KV cache size: ")) && !bytes.Contains(text, []byte("model")) {
		return
	}
	if collector.VLLMFactLine(string(text), &r.facts) {
		r.factsSaid = true
	}
}

// handFacts sends what the start-up lines read said of the model.
func (r *logReader) handFacts() {
	if r.factsSaid {
		r.send(engineFactsMsg{server: r.name, facts: r.facts})
		r.facts, r.factsSaid = collector.EngineFacts{}, false
	}
}

// handOver sends the intervals gathered.
func (r *logReader) handOver() {
	if r.batch != nil {
		r.send(&logMsg{server: r.name, ivs: r.batch, pos: r.batchPos})
		r.batch = nil
	}
}

// flush ends a read: its lines are taken, the start-up facts it found
// handed over, and its intervals wait for the tick (alive).
func (r *logReader) flush() {
	r.handFacts()
	r.last = r.read
}

// alive says the log is readable now, and every line so far taken: the
// position moves past lines without throughput too. The intervals read
// since the last tick go with it.
func (r *logReader) alive(t time.Time) {
	m := &logMsg{server: r.name, ivs: r.batch, watch: t, pos: r.last}
	r.batch = nil
	r.send(m)
}

// failed hands over what was read before the log became unreadable:
// alive is not told until it is readable again.
func (r *logReader) failed(err error) {
	if err != nil {
		r.handOver()
	}
}
