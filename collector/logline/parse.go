package logline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tpsmon/tpsmon/collector/engine"
	"github.com/tpsmon/tpsmon/collector/tail"
)

// Parser turns log lines into records. Parsers keep state across lines
// (llama.cpp prints a header, then its figures on lines of their own), so
// each server's log needs its own Parser.
type Parser struct {
	engine string // the log format read; "" = any
	// Loc and Year place timestamps that lack them (replay): vLLM has no
	// year, none of the engines a time zone.
	Loc  *time.Location
	Year int

	// Timestamps makes Parse read each line's own timestamp (replay).
	// Live, a line's time is when it was read (LiveTime), and this work is
	// skipped.
	Timestamps bool
	// StartedAt is when the server process started: llama.cpp's
	// --log-timestamps count from it (replay).
	StartedAt time.Time
	// Relative counts lines whose only timestamp counts from the process
	// start when StartedAt is unknown.
	Relative uint64
	// Cancelled counts requests the server cancelled: they print no
	// timing line, so their tokens never reach a log reader.
	Cancelled uint64

	id          Identity
	relStamps   bool          // lines carry llama.cpp elapsed-time stamps
	anchor      time.Time     // live: when the process started
	lastElapsed time.Duration // live: the last elapsed stamp

	// syslogNamed: a syslog identifier named the engine; syslogBody: the
	// lines carry such a prefix, which identify looks behind; syslogNone:
	// the first line had none, so the log has none.
	syslogNamed, syslogBody, syslogNone bool

	arr      arrivals // llama.cpp requests' arrivals, until their eval line
	llamaKey string   // slot/task of the last multi-line print_timing header
	slotText []byte   // the slot and task text of the last key made, and the key
	slotKeyS string
	keys     keyArena
	vllmID   string // the last vLLM engine id seen, and its key
	vllmKey  string
	lastDate time.Time // the last full date seen, for time-of-day-only stamps
	stamps   stampCache
	stampRes time.Duration     // the resolution of the last stamp read
	sglTP    map[string]string // SGLang DP rank -> the TP rank that logs its batch
	isoBuf   []byte            // a stamp without its fraction
	day      dayStart
	maxLine  int
	needles  []anchorGroup
	// format is the log format an auto-detected log's first record showed
	// ("" before it): the needles narrow to its parser's, and other
	// formats' fast paths are not tried again.
	format string
	// noLlamaFast leaves llama.cpp's lines to the general path (tests
	// compare the two).
	noLlamaFast bool
	Skipped     uint64 // lines that looked like throughput lines but did not parse
	// SkippedBy counts them by reason; FirstSkip is the first (nil: none).
	SkippedBy [NumSkipReasons]uint64
	FirstSkip *Skip
	Truncated uint64 // lines cut at the maximum length
}

// NewParser returns a parser for one engine's log, the engine named as
// the registry knows it; engine.Auto or "" tries every format's lines.
func NewParser(name string) (*Parser, error) {
	format := ""
	if name != "" && name != engine.Auto {
		e, err := engine.Lookup(name)
		if err != nil {
			return nil, err
		}
		if err := e.CheckLog(); err != nil {
			return nil, err
		}
		format = e.Log
	}
	set, ok := needleSets[format]
	if !ok {
		// The registry and the formats are tied by a test: this is a bug.
		return nil, fmt.Errorf("engine %s: the registry names log format %q, which logline has no parser for", name, format)
	}
	return &Parser{engine: format, Loc: time.UTC, maxLine: tail.MaxLine, needles: set}, nil
}

// needle is a text that every line one parser reads holds (see each
// parser's first test), found by its anchor: a byte of it picked rare in
// log text, which bytes.IndexByte finds many bytes at a time. A line
// without the anchor costs one such scan.
type needle struct {
	text   string
	anchor byte
}

var needles = map[string][]needle{
	engine.LMDeploy: {{"] Avg ", 'A'}},
	engine.VLLM:     {{"Avg generation throughput", 'A'}, {"SpecDecoding metrics: ", 'S'}},
	engine.SGLang:   {{"Decode batch", 'D'}, {"Prefill batch", 'P'}},
	engine.LlamaCpp: {{"eval time", 'v'}, {"slot print_timing: id", ':'}, {`"print_timings"`, '"'}, {"stop: cancel task, id_task = ", 'k'},
		{"draft acceptance = ", 'f'}, {"memory_seq_rm [", '['}},
	engine.TGI:    {{"time_per_token=", '='}, {" text_generation_router", '_'}, {`"target":"text_generation_router`, '_'}},
	engine.TRTLLM: {{`{"Active Request Count":`, 'A'}, {"iter = ", '='}},
}

// anchorGroup is the needles that share an anchor byte: one scan finds
// each place any of them may start.
type anchorGroup struct {
	anchor  byte
	texts   []string
	offs    []int    // where the anchor sits in each text
	engines []parser // whose needle each text is
}

// parser is one of the engine parsers, as a bit of a set.
type parser uint8

// The parsers in the order they are tried.
const (
	parseLMDeploy parser = 1 << iota
	parseVLLM
	parseSGLang
	parseLlamaCpp
	parseTGI
	parseTRTLLM
	parseAll = 1<<iota - 1
)

var parserOf = map[string]parser{engine.LMDeploy: parseLMDeploy, engine.VLLM: parseVLLM, engine.SGLang: parseSGLang,
	engine.LlamaCpp: parseLlamaCpp, engine.TGI: parseTGI, engine.TRTLLM: parseTRTLLM}

// needleSets are the needles of each engine's parser, and of all ("").
var needleSets = func() map[string][]anchorGroup {
	sets := map[string][]anchorGroup{}
	add := func(set string, engine parser, n needle) {
		gs := sets[set]
		i := 0
		for i < len(gs) && gs[i].anchor != n.anchor {
			i++
		}
		if i == len(gs) {
			gs = append(gs, anchorGroup{anchor: n.anchor})
		}
		gs[i].texts = append(gs[i].texts, n.text)
		gs[i].offs = append(gs[i].offs, strings.IndexByte(n.text, n.anchor))
		gs[i].engines = append(gs[i].engines, engine)
		sets[set] = gs
	}
	for _, e := range []string{engine.LMDeploy, engine.VLLM, engine.SGLang, engine.LlamaCpp, engine.TGI, engine.TRTLLM} {
		for _, n := range needles[e] {
			add(e, parserOf[e], n)
			add("", parserOf[e], n)
		}
	}
	return sets
}()

// mayMatch tells which of the parsers may read line: those whose needle
// it holds. A line with none is passed over after a scan per anchor byte,
// with no copy and no regexp. A parser without needles (tests) tries
// every parser on every line.
func (p *Parser) mayMatch(line []byte) parser {
	if p.needles == nil {
		if p.engine != "" {
			return parserOf[p.engine]
		}
		return parseAll
	}
	var found parser
	for _, g := range p.needles {
		for i := 0; i < len(line); i++ {
			k := bytes.IndexByte(line[i:], g.anchor)
			if k < 0 {
				break
			}
			i += k
			for t, text := range g.texts {
				if j := i - g.offs[t]; j >= 0 && j+len(text) <= len(line) && string(line[j:j+len(text)]) == text {
					found |= g.engines[t]
				}
			}
		}
	}
	return found
}

// anchored is a text found by one of its bytes, picked rare in log text
// (see needle).
type anchored struct {
	text string
	off  int
}

// anchor is text found by its byte c (by its first, were c not in it).
func anchor(text string, c byte) anchored {
	return anchored{text, max(0, strings.IndexByte(text, c))}
}

// in is bytes.Index(b, a.text).
func (a anchored) in(b []byte) int { return indexAnchored(b, a.text, a.off) }

// indexAnchored is bytes.Index(b, text) for a text whose byte at off is
// rare in b: the scan looks for that byte.
func indexAnchored(b []byte, text string, off int) int {
	for i := off; i < len(b); i++ {
		k := bytes.IndexByte(b[i:], text[off])
		if k < 0 {
			return -1
		}
		i += k
		if j := i - off; j+len(text) <= len(b) && string(b[j:j+len(text)]) == text {
			return j
		}
	}
	return -1
}

var (
	ansi = lazy(`\x1b\[[0-9;]*[A-Za-z]`)
	// syslogANSI is a colour code as rsyslog escapes its ESC byte ("#033").
	syslogANSI = lazy(`#033\[[0-9;]*[A-Za-z]`)
	syslogESC  = []byte("#033[")
)

// Parse reads one line (without its newline). ok is false for lines that
// carry no throughput.
func (p *Parser) Parse(line []byte) (r Record, ok bool) {
	if len(line) > p.maxLine {
		line = line[:p.maxLine]
		p.Truncated++
	}
	if bytes.IndexByte(line, 0x1b) >= 0 {
		line = ansi.ReplaceAll(line, nil)
	}
	if bytes.Contains(line, syslogESC) {
		line = syslogANSI.ReplaceAll(line, nil)
	}
	if p.identifying() {
		p.identify(line)
	}
	if p.engine == engine.VLLM || p.engine == "" && (p.format == "" || p.format == engine.VLLM) {
		// The hot path of a busy vLLM log, without regexps or copies.
		if r, ok, matched := p.vllmFast(line); matched {
			if ok && p.Timestamps {
				r.Time = p.stamp(line)
				if !r.Time.IsZero() && r.Time.After(p.lastDate) {
					p.lastDate = r.Time
				}
			}
			if ok {
				p.settle(engine.VLLM)
				if p.id.Engine == "" {
					p.id.Engine = r.Engine
				}
			}
			return r, ok
		}
	}
	if (p.engine == engine.LlamaCpp || p.engine == "" && p.mayBeLlama()) && !p.noLlamaFast {
		// The hot path of a busy llama-server log.
		if r, ok, matched := p.llamaFast(line); matched {
			if !ok {
				return Record{}, false
			}
			return p.finish(r, line)
		}
	}
	if (p.engine == engine.LlamaCpp || p.engine == "" && p.mayBeLlama()) && p.llamaArrival(line) {
		return Record{}, false
	}
	may := p.mayMatch(line)
	if may == 0 {
		return Record{}, false
	}
	if r, ok = p.match(line, may); !ok {
		return Record{}, false
	}
	return p.finish(r, line)
}

// settle narrows an auto-detected log's needles to format's parser once
// a record of it is read: one server's log is one engine's, and every
// other parser's anchor bytes cost a scan of each line (a busy vLLM log's
// replay spent a quarter of its time in them).
func (p *Parser) settle(format string) {
	if p.engine != "" || p.format != "" {
		return
	}
	if set, ok := needleSets[format]; ok {
		p.format, p.needles = format, set
	}
}

// mayBeLlama tells whether an auto-detected log may hold llama-server's
// lines: until its first record, and where that was llama.cpp's (Ollama's
// relayed lines are). A request's arrival is looked for only there: four
// searches a line cost a busy vLLM log's replay a third of its time.
func (p *Parser) mayBeLlama() bool {
	return p.format == "" || p.format == engine.LlamaCpp
}

// match runs the parsers whose needles the line holds (may: only p's
// engine's are looked for), in turn; the first that reads it wins. Only llama.cpp's reads the bytes:
// the others get a copy.
func (p *Parser) match(line []byte, may parser) (r Record, ok bool) {
	if may == parseLlamaCpp {
		return p.llamacpp(line) // a busy llama-server's lines: no loop
	}
	var s string
	for _, c := range []struct {
		engine parser
		read   func(string) (Record, bool)
	}{{parseLMDeploy, p.lmdeploy}, {parseVLLM, p.vllm}, {parseSGLang, p.sglang}, {parseLlamaCpp, nil}, {parseTGI, p.tgi}, {parseTRTLLM, p.trtllm}} {
		switch {
		case may&c.engine == 0:
			continue
		case c.read == nil:
			r, ok = p.llamacpp(line)
		default:
			if s == "" {
				s = string(line)
			}
			r, ok = c.read(s)
		}
		if ok {
			return r, true
		}
	}
	return Record{}, false
}

// finish checks the record a parser read from line and dates it.
func (p *Parser) finish(r Record, line []byte) (Record, bool) {
	if !r.valid() {
		// The pattern matched, a number in it did not parse ("1.2.3").
		p.skip(SkipBadNumber, r.Engine, line)
		return Record{}, false
	}
	if r.Time.IsZero() && p.Timestamps {
		r.Time = p.stamp(line)
	}
	if !r.Time.IsZero() && r.Time.After(p.lastDate) {
		p.lastDate = r.Time
	}
	p.settle(r.Engine)
	if r.Engine == engine.LlamaCpp && len(p.arr.byKey) > 0 {
		switch r.Kind {
		case Request:
			p.llamaTTFT(&r, line)
		case Progress:
			p.llamaProgressSlot(&r, line)
		}
	}
	if p.id.Engine == "" {
		p.id.Engine = r.Engine
	}
	// Ollama relays llama-server's lines: they are Ollama's once its log
	// has said so.
	r.Engine = engine.Refine(r.Engine, p.id.Engine)
	if r.Kind == Cancelled {
		p.Cancelled++
	}
	return r, true
}

func num(s string) float64 {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return -1
	}
	return v
}

// --- vLLM ------------------------------------------------------------------

var vllmStat = lazy(`(?:(?:Engine (\d+)|(\d+) Engines Aggregated): )?Avg prompt throughput: ([0-9.]+) tokens/s, Avg generation throughput: ([0-9.]+) tokens/s, Running: (\d+) reqs, (?:Swapped: (\d+) reqs, Pending: (\d+) reqs|Waiting: (\d+) reqs)(?:, Preemptions: (\d+))?(?:, GPU KV cache usage: ([0-9.]+)%)?`)

// vllmSpec is V1's speculative-decoding line (spec_decode/metrics.py),
// its counts over the logging interval. V0's line counts since the start
// under other words, and is not read.
var vllmSpec = lazy(`SpecDecoding metrics: .*?Accepted: (\d+) tokens, Drafted: (\d+) tokens`)

func (p *Parser) vllm(s string) (Record, bool) {
	if strings.Contains(s, "SpecDecoding metrics: ") {
		m := vllmSpec.FindStringSubmatch(s)
		if m == nil {
			return Record{}, false
		}
		r := newRecord(Spec, engine.VLLM)
		r.Accepted, r.Drafted = num(m[1]), num(m[2])
		return r, true
	}
	if !strings.Contains(s, "Avg generation throughput") || lmdeployPrefix.MatchString(s) {
		return Record{}, false
	}
	m := vllmStat.FindStringSubmatch(s)
	if m == nil {
		p.skip(SkipUnparsed, engine.VLLM, []byte(s))
		return Record{}, false
	}
	r := newRecord(Stat, engine.VLLM)
	r.PromptTPS, r.GenTPS, r.Running = num(m[3]), num(m[4]), num(m[5])
	r.DefaultGap = 10 * time.Second // V1: VLLM_LOG_STATS_INTERVAL
	if m[6] != "" {
		r.DefaultGap, r.GapIsExact = 5*time.Second, true // V0: see vllmQueue
		r.Waiting = num(m[7])
	} else {
		r.Waiting = num(m[8])
	}
	if m[9] != "" {
		r.Preemptions = num(m[9])
	}
	if m[10] != "" {
		r.KV = num(m[10]) / 100
	}
	switch {
	case m[1] != "":
		r.Key = "engine " + m[1]
	case m[2] != "":
		r.Aggregated = true
	}
	return r, true
}

// --- SGLang ----------------------------------------------------------------

var (
	sglDecode = lazy(`Decode batch(?: \[\d+\])?[.,] #running-req: (\d+), (.*?)gen throughput \(token/s\): ([0-9.]+), #queue-req: (\d+)`)
	// Between #cached-token and #running-req: the KV use, "token usage",
	// or hybrid models' "full token usage" with "swa token usage" or
	// "mamba usage"; 2024's "cache hit rate" before it.
	sglPrefill = lazy(`Prefill batch(?: \[\d+\])?[.,] #new-seq: (\d+), #new-token: (\d+), #cached-token: (\d+), (.*?)#running-req: (\d+), #queue-req: (\d+)`)
	sglPrefix  = lazy(`\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d|\d\d:\d\d:\d\d)((?: (?:NP|DP|PP|TP|EP)\d+)*)\] `)
	sglRank    = lazy(`(DP|TP)(\d+)`)
)

// sglangSteps is --decode-log-interval's default: a decode line comes
// every 40 decode steps, each making one token per running request (times
// the accept length with speculative decoding).
const sglangSteps = 40

// sglangMaxSpan bounds the span a decode line's own numbers give (a
// stalled server's line may say minutes; a misprint, days).
const sglangMaxSpan = 5 * time.Minute

func (p *Parser) sglang(s string) (Record, bool) {
	decode := strings.Contains(s, "Decode batch")
	if !decode && !strings.Contains(s, "Prefill batch") {
		return Record{}, false
	}
	r := newRecord(Stat, engine.SGLang)
	if pm := sglPrefix.FindStringSubmatch(s); pm != nil {
		if !p.sglangRank(&r, pm[2]) {
			return Record{}, false
		}
	}
	if decode {
		m := sglDecode.FindStringSubmatch(s)
		if m == nil {
			p.skip(SkipUnparsed, engine.SGLang, []byte(s))
			return Record{}, false
		}
		r.Running, r.GenTPS, r.Waiting = num(m[1]), num(m[3]), num(m[4])
		r.KV = sglangKV(m[2])
		// gen throughput is the tokens of the steps since the previous
		// decode line over exactly the time since it (scheduler
		// log_decode_stats): the line's span is those tokens over it.
		r.GapIsExact = true
		r.Duration = sglangSpan(r.Running, r.GenTPS, m[2])
		r.DefaultGap = r.Duration
		if r.DefaultGap == 0 {
			r.DefaultGap = time.Second
		}
		return r, true
	}
	m := sglPrefill.FindStringSubmatch(s)
	if m == nil {
		p.skip(SkipUnparsed, engine.SGLang, []byte(s))
		return Record{}, false
	}
	r.Kind = Batch
	r.Tokens, r.Cached, r.KV, r.Running, r.Waiting = num(m[2]), num(m[3]), sglangKV(m[4]), num(m[5]), num(m[6])
	return r, true
}

// sglangRank reads the rank tags of a line's prefix (" DP6 TP6 EP6") into
// r's key and tells whether the line is counted. Tensor-parallel ranks log
// the same batch: only the first of each data-parallel rank counts (TP0
// without DP; under DP attention DPk's own TP rank, TPk).
func (p *Parser) sglangRank(r *Record, tags string) bool {
	dp, tp := "", ""
	for _, rk := range sglRank.FindAllStringSubmatch(tags, -1) {
		if rk[1] == "DP" {
			dp = rk[2]
		} else {
			tp = rk[2]
		}
	}
	if dp == "" {
		return tp == "" || tp == "0"
	}
	r.Key = "DP" + dp
	if tp == "" {
		return true
	}
	if p.sglTP == nil {
		p.sglTP = map[string]string{}
	}
	first, ok := p.sglTP[dp]
	if !ok {
		if len(p.sglTP) < maxSGLangRanks {
			p.sglTP[dp] = tp
		}
		return true
	}
	return first == tp
}

// maxSGLangRanks bounds the DP ranks remembered.
const maxSGLangRanks = 1024

// sglangKV is the KV use among a line's fields: "token usage", or for a
// hybrid model the larger of "full token usage" and "swa token usage", as
// SGLang's own token_usage gauge takes it; -1 when none is printed.
func sglangKV(fields string) float64 {
	const mark = "token usage: "
	kv := -1.0
	for rest := fields; ; {
		i := strings.Index(rest, mark)
		if i < 0 {
			return kv
		}
		// "token usage", "full token usage" or "swa token usage", after
		// ", " or first; "mamba usage" is none of them.
		if before := strings.TrimSuffix(strings.TrimSuffix(rest[:i], "full "), "swa "); before == "" || strings.HasSuffix(before, ", ") {
			kv = max(kv, num(field(rest[i+len(mark):])))
		}
		rest = rest[i+len(mark):]
	}
}

// field is s up to its first comma.
func field(s string) string {
	if i := strings.IndexByte(s, ','); i >= 0 {
		return s[:i]
	}
	return s
}

// sglangSpan is the time a decode line's tokens took at its stated rate:
// steps x running (x accept len) / gen throughput; 0 when that is not
// known (no request running, no rate).
func sglangSpan(running, rate float64, fields string) time.Duration {
	if !(running > 0 && rate > 0) {
		return 0
	}
	tokens := sglangSteps * running
	const accept = "accept len: "
	if i := strings.Index(fields, accept); i >= 0 {
		if acc := num(field(fields[i+len(accept):])); acc >= 1 {
			tokens *= acc
		}
	}
	secs := tokens / rate
	if !(secs < sglangMaxSpan.Seconds()) {
		return sglangMaxSpan
	}
	return time.Duration(secs * float64(time.Second))
}

// --- llama.cpp (and Ollama >= 0.30) ----------------------------------------

var (
	llamaHeader = lazy(`slot print_timing: id +(\d+) \| task (-?\d+) \|\s*$`)
	// A finished request's speculation (server-context.cpp print_timings,
	// when it drafted): "draft acceptance = 0.46218 (   55 accepted /   119
	// generated)", then ", mean len = ..." or newer per-position figures.
	// Any slot line's request: "slot   operator(): id  0 | task 7 | ...".
	llamaSlotTask = lazy(`slot +\S+ id +(\d+) \| task (-?\d+) \|`)
	llamaDraft    = lazy(`draft acceptance = +[0-9.]+ \( *(\d+) accepted / *(\d+) generated\)`)
	llamaProgress = lazy(`n_(?:decoded|gen) = +(\d+), tg = +([0-9.]+) t/s(?:, tg_3s = +([0-9.]+) t/s)?`)
)

var (
	llamaCancel   = anchor("stop: cancel task, id_task = ", ',')
	llamaPerf     = anchor("llama_perf_", 'f')
	llamaTimings  = []byte(`"print_timings"`)
	llamaEval     = anchor("eval time", 'v')
	llamaSlotMark = anchor("slot print_timing: id", ':')
	llamaDecoded  = anchor("n_decoded =", '_')
	llamaGen      = anchor("n_gen =", '_')
	// The mid-2024 text log ("INFO [           print_timings] generation
	// eval time = ... | tid=... timestamp=... id_slot=0 id_task=7 ..."),
	// kept by ik_llama.cpp and relayed by Ollama (slot_id=, task_id=).
	llamaTextMark = anchor("print_timings] ", ']')
)

// llamacpp reads llama.cpp's lines from the bytes (a timing line is about
// half a busy llama-server log): no copy, regexps only for the rare
// header and progress lines.
func (p *Parser) llamacpp(line []byte) (Record, bool) {
	if i := llamaCancel.in(line); i >= 0 {
		r := newRecord(Cancelled, engine.LlamaCpp)
		r.Key = "task " + string(bytes.TrimSpace(line[i+len(llamaCancel.text):]))
		return r, true
	}
	if llamaPerf.in(line) >= 0 {
		return Record{}, false // llama-cli's end-of-run summary, not a server
	}
	if bytes.Contains(line, llamaTimings) {
		// Behind whatever prefix relayed it (journald, docker -t, a
		// quote): the object starts at its first brace.
		if j := bytes.IndexByte(line, '{'); j >= 0 {
			return p.llamaJSON(line[j:])
		}
	}
	if i := llamaTextMark.in(line); i >= 0 {
		return p.llamaText(line, i)
	}
	if bytes.Contains(line, []byte("draft acceptance = ")) {
		return p.llamaSpec(line)
	}
	if i := bytes.Index(line, []byte("memory_seq_rm [")); i >= 0 {
		return p.llamaCached(line, i+len("memory_seq_rm ["))
	}
	key, i, ok := p.llamaLineKey(line)
	if !ok {
		return Record{}, false
	}
	if hasProgressMark(line) {
		if m := llamaProgress.FindSubmatch(line); m != nil {
			r := newRecord(Progress, engine.LlamaCpp)
			r.Key, r.Tokens, r.UserTPS = key, num(string(m[1])), num(string(m[2]))
			r.SinceStartTPS = r.UserTPS
			if len(m[3]) > 0 {
				r.UserTPS = num(string(m[3]))
			}
			return r, true
		}
	}
	if i < 0 {
		return Record{}, false
	}
	from := i
	if i >= len("prompt ") && string(line[i-len("prompt "):i]) == "prompt " {
		from = i - len("prompt ")
	}
	prompt, ms, tokens, perSec, ok := llamaEvalFast(line[from:])
	if !ok {
		return Record{}, false
	}
	return llamaRequest(key, prompt, ms, tokens, perSec), true
}

// llamaSpec reads a request's draft acceptance line: under its own slot
// and task, or under the multi-line header before it.
func (p *Parser) llamaSpec(line []byte) (Record, bool) {
	m := llamaDraft.FindSubmatch(line)
	if m == nil {
		return Record{}, false
	}
	r := newRecord(Spec, engine.LlamaCpp)
	r.Key = p.llamaKey
	if slot := llamaSlotMark.in(line); slot >= 0 {
		if k, ok := p.slotKey(line[slot:]); ok {
			r.Key = k
		}
	}
	r.Accepted, r.Drafted = num(string(m[1])), num(string(m[2]))
	return r, true
}

// llamaCached reads the start of a request's prompt processing: "[cached ]
// n_tokens = N, memory_seq_rm [P, end)" (older: "n_past = N, ..."), at
// INFO before 2026, at trace verbosity since; P, from j on, is where
// processing resumes. Stream keeps only a task's first.
func (p *Parser) llamaCached(line []byte, j int) (Record, bool) {
	m := llamaSlotTask.FindSubmatch(line)
	end := bytes.Index(line[j:], []byte(", end)"))
	if m == nil || end < 0 {
		return Record{}, false
	}
	r := newRecord(Cached, engine.LlamaCpp)
	r.Key, r.Cached = "slot "+string(m[1])+" task "+string(m[2]), num(string(line[j:j+end]))
	return r, true
}

// hasProgressMark tells whether line holds llamaDecoded or llamaGen: one
// scan for the '_' both are found by (print_timing's own '_' is on every
// timing line, so two scans cost twice).
func hasProgressMark(line []byte) bool {
	for i := 1; i < len(line); i++ {
		k := bytes.IndexByte(line[i:], '_')
		if k < 0 {
			return false
		}
		i += k
		if at := line[i-1:]; bytes.HasPrefix(at, []byte(llamaDecoded.text)) || bytes.HasPrefix(at, []byte(llamaGen.text)) {
			return true
		}
	}
	return false
}

// llamaLineKey returns the request a timing line belongs to (its own
// slot and task, or those of the header line before it) and where its
// "eval time" is (-1: none). A header line is kept for the lines after
// it; ok is false for it and for lines that are no timing line.
func (p *Parser) llamaLineKey(line []byte) (key string, eval int, ok bool) {
	slot := llamaSlotMark.in(line)
	if slot >= 0 && bytes.HasSuffix(bytes.TrimRight(line, " "), []byte("|")) {
		if h := llamaHeader.FindSubmatch(line); h != nil {
			p.llamaKey = "slot " + string(h[1]) + " task " + string(h[2])
			return "", -1, false
		}
	}
	key = p.llamaKey
	eval = llamaEval.in(line)
	if slot >= 0 {
		if k, ok := p.slotKey(line[slot:]); ok {
			key = k
		}
	} else if eval < 0 || key == "" {
		return "", -1, false
	}
	return key, eval, true
}

// llamaText reads a print_timings line of the mid-2024 text log, whose
// mark ends at i: the figures as the other forms print them, the request
// and the time from the key=value pairs after them.
func (p *Parser) llamaText(line []byte, i int) (Record, bool) {
	rest := bytes.TrimLeft(line[i+len(llamaTextMark.text):], " ")
	rest = bytes.TrimPrefix(rest, []byte("generation "))
	// "prompt eval time     =": the name is padded to the '='.
	eq := bytes.IndexByte(rest, '=')
	if eq < 0 {
		return Record{}, false
	}
	var figures []byte
	switch string(bytes.TrimRight(rest[:eq], " ")) {
	case "prompt eval time":
		figures = append([]byte("prompt eval time ="), rest[eq+1:]...)
	case "eval time":
		figures = append([]byte("eval time ="), rest[eq+1:]...)
	default:
		return Record{}, false // total time
	}
	prompt, ms, tokens, perSec, ok := llamaEvalFast(figures)
	if !ok {
		p.skip(SkipBadNumber, engine.LlamaCpp, line)
		return Record{}, false
	}
	slot, okS := kvField(line, "id_slot=", "slot_id=")
	task, okT := kvField(line, "id_task=", "task_id=")
	if !okS || !okT {
		p.skip(SkipUnparsed, engine.LlamaCpp, line)
		return Record{}, false
	}
	r := llamaRequest("slot "+slot+" task "+task, prompt, ms, tokens, perSec)
	if ts, ok := kvField(line, "timestamp="); ok {
		if sec, err := strconv.ParseInt(ts, 10, 64); err == nil && sec > 0 {
			r.Time = time.Unix(sec, 0)
		}
	}
	return r, true
}

// kvField is the value of the first of names (each ending in '=') that
// the line has as a " name=value" pair: its digits, a leading '-' kept.
func kvField(line []byte, names ...string) (string, bool) {
	for _, name := range names {
		for b := line; ; {
			k := bytes.Index(b, []byte(name))
			if k < 0 {
				break
			}
			if k > 0 && b[k-1] == ' ' {
				v := b[k+len(name):]
				neg := 0
				if len(v) > 0 && v[0] == '-' {
					neg = 1
				}
				if n := countDigits(v, neg); n > neg {
					return string(v[:n]), true
				}
			}
			b = b[k+len(name):]
		}
	}
	return "", false
}

// llamaJSON reads the mid-2024 JSON log lines of print_timings (Ollama's
// of early 2024 name the request slot_id and task_id). line starts at the
// object; what follows it (a relay's suffix) is left.
func (p *Parser) llamaJSON(line []byte) (Record, bool) {
	var j struct {
		Timestamp int64    `json:"timestamp"`
		Msg       string   `json:"msg"`
		Slot      *int     `json:"id_slot"`
		Task      *int     `json:"id_task"`
		SlotOld   *int     `json:"slot_id"`
		TaskOld   *int     `json:"task_id"`
		TPrompt   float64  `json:"t_prompt_processing"`
		NPrompt   *float64 `json:"n_prompt_tokens_processed"`
		NPromptLF *float64 `json:"num_prompt_tokens_processed"`
		TGen      float64  `json:"t_token_generation"`
		NGen      float64  `json:"n_decoded"`
		PerSec    float64  `json:"n_tokens_second"`
	}
	if err := json.NewDecoder(bytes.NewReader(line)).Decode(&j); err != nil {
		p.skip(SkipUnparsed, engine.LlamaCpp, line)
		return Record{}, false
	}
	slot, task := j.Slot, j.Task
	if slot == nil || task == nil {
		slot, task = j.SlotOld, j.TaskOld
	}
	if slot == nil || task == nil {
		p.skip(SkipUnparsed, engine.LlamaCpp, line)
		return Record{}, false
	}
	nPrompt := j.NPrompt
	if nPrompt == nil {
		nPrompt = j.NPromptLF
	}
	r := newRecord(Request, engine.LlamaCpp)
	r.Key = fmt.Sprintf("slot %d task %d", *slot, *task)
	if j.Timestamp > 0 {
		r.Time = time.Unix(j.Timestamp, 0)
	}
	switch {
	case strings.HasPrefix(strings.TrimSpace(j.Msg), "prompt eval time"):
		if nPrompt == nil {
			p.skip(SkipUnparsed, engine.LlamaCpp, line)
			return Record{}, false
		}
		r.PromptTokens, r.Duration = *nPrompt, time.Duration(j.TPrompt*float64(time.Millisecond))
	case strings.HasPrefix(strings.TrimSpace(j.Msg), "generation eval time"):
		r.Tokens, r.UserTPS, r.Duration = j.NGen, j.PerSec, time.Duration(j.TGen*float64(time.Millisecond))
		r.TPOT = decodeGap(r.Duration, r.Tokens)
	default:
		return Record{}, false
	}
	return r, true
}

// --- TGI -------------------------------------------------------------------

var tgiSuccess = lazy(`(\w+)\{(?:parameters=.*? )?total_time="([^"]+)" validation_time="([^"]+)" queue_time="([^"]+)" inference_time="([^"]+)" time_per_token="([^"]+)"[^}]*\}: text_generation_router::server: \S+: Success`)

// tgiRequestSpans are the request handlers' spans.
var tgiRequestSpans = []string{"generate", "generate_stream", "chat_completions", "completions", "compat_generate"}

// tgiFailure is an ERROR line of the router's inference or HTTP code:
// the span chain before its target says whose it is.
var (
	tgiFailure = lazy(`\bERROR (\S.*?): text_generation_router(?:_v\d+)?::(?:infer|server)\S*: \S+: `)
	// tgiRequestSpan is a request handler's span in the chain (the
	// batch loop's errors are in batch{…} spans, not a request's: each
	// of its requests then logs its own failure).
	tgiRequestSpan = lazy(`(?:^|:)(?:` + strings.Join(tgiRequestSpans, "|") + `)(?:\{|:|$)`)
	// tgiFailureTarget is the same targets in a JSON line's own field.
	tgiFailureTarget = lazy(`^text_generation_router(?:_v\d+)?::(?:infer|server)`)
)

func (p *Parser) tgi(s string) (Record, bool) {
	if i := strings.Index(s, `{"`); i >= 0 && strings.Contains(s[i:], `"target":"text_generation_router`) {
		return p.tgiJSON(s, s[i:])
	}
	if !strings.Contains(s, "Success") || !strings.Contains(s, "time_per_token=") {
		return p.tgiFailed(s)
	}
	m := tgiSuccess.FindStringSubmatch(s)
	if m == nil {
		p.skip(SkipUnparsed, engine.TGI, []byte(s))
		return Record{}, false
	}
	return p.tgiSpan(s, m[1], m[2], m[4], m[5], m[6])
}

// tgiSpan reads a request's Success span: its name and the durations
// TGI records in it, as Rust's Debug prints them ("611.286748ms").
func (p *Parser) tgiSpan(line, name, total, queue, inference, perToken string) (Record, bool) {
	inf, err1 := time.ParseDuration(inference)
	tpt, err2 := time.ParseDuration(perToken)
	if err1 != nil || err2 != nil || tpt <= 0 {
		p.skip(SkipBadNumber, engine.TGI, []byte(line))
		return Record{}, false
	}
	r := newRecord(Request, engine.TGI)
	// The line has no token count, but time_per_token is inference_time
	// divided by it.
	r.Tokens = float64(int64(float64(inf)/float64(tpt) + 0.5))
	r.Duration, r.UserTPS = inf, float64(time.Second)/float64(tpt)
	r.Key = name
	// TGI's time per token includes the prefill (inference over tokens).
	r.TPOT = tpt
	if total, err := time.ParseDuration(total); err == nil && total >= 0 {
		r.Total = total
	}
	if queue, err := time.ParseDuration(queue); err == nil && queue >= 0 {
		r.Queue = queue
	}
	return r, true
}

// tgiEvent is a line of the router's --json-output: tracing's JSON
// layout with the event's fields flattened (message at the top; the
// launcher's are under fields), the current span with its recorded
// fields, and the chain of spans from the outermost.
type tgiEvent struct {
	Level   string `json:"level"`
	Message string `json:"message"`
	Target  string `json:"target"`
	Span    struct {
		Name           string `json:"name"`
		TotalTime      string `json:"total_time"`
		QueueTime      string `json:"queue_time"`
		InferenceTime  string `json:"inference_time"`
		TimePerToken   string `json:"time_per_token"`
		ValidationTime string `json:"validation_time"`
	} `json:"span"`
	Spans []struct {
		Name string `json:"name"`
	} `json:"spans"`
}

// tgiJSON reads a --json-output line (obj, from its first brace: a
// journald or docker prefix before it is the stamp's): the Success
// event of a request's span as the text one, a request's own ERROR as
// its failure. The router's other events are no request's.
func (p *Parser) tgiJSON(line, obj string) (Record, bool) {
	var ev tgiEvent
	if err := json.Unmarshal([]byte(obj), &ev); err != nil {
		p.skip(SkipUnparsed, engine.TGI, []byte(line))
		return Record{}, false
	}
	switch {
	case ev.Message == "Success" && ev.Level == "INFO" && ev.Target == "text_generation_router::server":
		if ev.Span.TimePerToken == "" || ev.Span.InferenceTime == "" {
			p.skip(SkipUnparsed, engine.TGI, []byte(line))
			return Record{}, false
		}
		return p.tgiSpan(line, ev.Span.Name, ev.Span.TotalTime, ev.Span.QueueTime, ev.Span.InferenceTime, ev.Span.TimePerToken)
	case ev.Level == "ERROR" && tgiFailureTarget.MatchString(ev.Target):
		for _, sp := range ev.Spans {
			if slices.Contains(tgiRequestSpans, sp.Name) {
				return newRecord(Failed, engine.TGI), true
			}
		}
	}
	return Record{}, false
}

// tgiFailed reads a request's failure: TGI logs one ERROR line in the
// request's span when its validation fails, its generation fails (the
// backend's error, sent to each request of the batch) or comes out
// incomplete, and counts it in tgi_request_failure.
func (p *Parser) tgiFailed(s string) (Record, bool) {
	if !strings.Contains(s, "ERROR") {
		return Record{}, false
	}
	m := tgiFailure.FindStringSubmatch(s)
	if m == nil || !tgiRequestSpan.MatchString(m[1]) {
		return Record{}, false
	}
	return newRecord(Failed, engine.TGI), true
}

// --- LMDeploy --------------------------------------------------------------

var (
	lmdeployPrefix = lazy(`\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) DP(\d+)\] `)
	lmdeployNew    = lazy(`Avg thr \(in/out\): ([0-9.]+) / ([0-9.]+) tokens/s, .*?Engine \(running/waiting\): (\d+) / (\d+), KV cache: ([0-9.]+)%`)
	lmdeployOld    = lazy(`Avg prompt throughput: ([0-9.]+) tokens/s, Avg generation throughput: ([0-9.]+) tokens/s, Finished: (\d+) reqs, Unfinished: (\d+) reqs, Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([0-9.]+)%`)
)

func (p *Parser) lmdeploy(s string) (Record, bool) {
	if !strings.Contains(s, " DP") || !strings.Contains(s, "] Avg ") {
		return Record{}, false
	}
	pm := lmdeployPrefix.FindStringSubmatch(s)
	if pm == nil {
		return Record{}, false
	}
	r := newRecord(Stat, engine.LMDeploy)
	r.Key, r.DefaultGap = "DP"+pm[2], 10*time.Second
	if m := lmdeployNew.FindStringSubmatch(s); m != nil {
		r.PromptTPS, r.GenTPS, r.Running, r.Waiting, r.KV = num(m[1]), num(m[2]), num(m[3]), num(m[4]), num(m[5])/100
	} else if m := lmdeployOld.FindStringSubmatch(s); m != nil {
		r.PromptTPS, r.GenTPS, r.Running, r.Waiting, r.KV = num(m[1]), num(m[2]), num(m[5]), num(m[6]), num(m[7])/100
	} else {
		if strings.Contains(s, "tokens/s") {
			p.skip(SkipUnparsed, engine.LMDeploy, []byte(s))
		}
		return Record{}, false
	}
	if t, err := time.ParseInLocation("2006-01-02 15:04:05", pm[1], p.Loc); err == nil {
		r.Time = t
	}
	return r, true
}

// --- TensorRT-LLM ----------------------------------------------------------

var (
	trtIterJSON = lazy(`\{"Active Request Count":(\d+),.*?"Iteration Counter":(\d+).*?\}`)
	trtStamp    = lazy(`"Timestamp":"(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)"`)
	// The PyTorch executor's print_iter_log line. Its fields moved between
	// versions (elapsed_time in seconds until 2025-05, then host_step_time
	// in ms; num_scheduled_requests after the states, later before them
	// with " = "), so each is found on its own.
	trtIter   = lazy(`\biter = (\d+), `)
	trtStep   = lazy(`\b(?:host_step_time = ([0-9.]+) ?ms|elapsed_time = ([0-9.]+) ?s)\b`)
	trtSched  = lazy(`\bnum_scheduled_requests(?::| =) (\d+)`)
	trtStates = lazy(`'num_ctx_requests': (\d+), 'num_ctx_tokens': (\d+), 'num_generation_tokens': (\d+)`)
)

func (p *Parser) trtllm(s string) (Record, bool) {
	if m := trtIterJSON.FindStringSubmatch(s); m != nil {
		r := newRecord(Iteration, engine.TRTLLM)
		r.Running, r.Iterations = num(m[1]), num(m[2])
		if ts := trtStamp.FindStringSubmatch(s); ts != nil {
			if t, err := time.ParseInLocation("01-02-2006 15:04:05", ts[1], p.Loc); err == nil {
				r.Time = t
			}
		}
		return r, true
	}
	if !strings.Contains(s, "iter = ") {
		return Record{}, false
	}
	it, step, states := trtIter.FindStringSubmatch(s), trtStep.FindStringSubmatch(s), trtStates.FindStringSubmatch(s)
	if it == nil || step == nil || states == nil {
		if strings.Contains(s, "[TRT-LLM]") || strings.Contains(s, "num_generation_tokens") {
			p.skip(SkipUnparsed, engine.TRTLLM, []byte(s))
		}
		return Record{}, false
	}
	sched := trtSched.FindStringSubmatch(s)
	if sched == nil {
		// num_generation_tokens counts CUDA-graph padding (TensorRT-LLM
		// PR #3914): without the scheduled requests the line holds no
		// count of real tokens.
		p.skip(SkipPadded, engine.TRTLLM, []byte(s))
		return Record{}, false
	}
	r := newRecord(Request, engine.TRTLLM)
	d := num(step[1]) // ms
	if step[1] == "" {
		d = num(step[2]) * 1000
	}
	// Every generation request of the step makes one token; the scheduled
	// requests that are not context requests are they (design §3).
	ctx, scheduled := num(states[1]), num(sched[1])
	r.Iterations, r.Running = num(it[1]), scheduled
	r.Tokens = scheduled - ctx
	if ctx < 0 || scheduled < 0 || r.Tokens < 0 {
		r.Tokens = -1 // refused by finish as unreadable
	}
	r.Duration = time.Duration(d * float64(time.Millisecond))
	if d > 0 && r.Tokens > 0 {
		r.UserTPS = 1000 / d
	}
	r.Key = "iterations"
	return r, true
}
