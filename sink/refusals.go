package sink

import (
	"bytes"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tpsmon/tpsmon/schema"
)

// A refusal episode is InfluxDB refusing the points of one group (a
// measurement and its server tag) for their content, batch after batch: a
// field type conflict another client caused, a key too long, a retention
// policy shorter than an outage. The points go to quarantine, which is
// right for one bad point and hides a broken series: so the episode is
// logged once at its start and every summaryEvery, shows on /readyz while
// it lasts, and ends with a batch in which points of the group are taken
// and none refused, or once none was refused for StaleAfter (the server
// was removed).
type group struct{ measurement, server string }

type episode struct {
	since, last, logged time.Time
	points              uint64
	reason              string
}

// Refusal is an ongoing refusal episode, as Health reports it.
type Refusal struct {
	Measurement string
	Server      string // the points' server tag; empty when they have none
	Points      uint64 // refused since Since
	Since, Last time.Time
	Reason      string // InfluxDB's message, shortened
}

const (
	summaryEvery      = 10 * time.Minute
	defaultStaleAfter = 30 * time.Minute
	// maxEpisodes bounds the groups followed one by one; beyond, a
	// measurement's other servers share one.
	maxEpisodes = 64
	othersTag   = "(other servers)"
	maxReason   = 300
)

// tally is what one batch's delivery made of its points.
type tally struct {
	refused  map[group]uint64
	reasons  map[group]string
	accepted [][]byte // runs of lines InfluxDB took
}

func (t *tally) refuse(lines []byte, reason string) {
	if t.refused == nil {
		t.refused, t.reasons = map[group]uint64{}, map[group]string{}
	}
	eachLine(lines, func(l []byte) {
		g := groupOf(l)
		t.refused[g]++
		t.reasons[g] = reason
	})
}

// settleLocked applies a batch's tally to the episodes; s.mu is held.
func (s *Sender) settleLocked(t *tally, now time.Time) {
	if s.refusing == nil {
		s.refusing = map[group]*episode{}
	}
	for g, n := range t.refused {
		if s.refusing[g] == nil && len(s.refusing) >= maxEpisodes {
			g = group{g.measurement, othersTag}
		}
		s.refused += n
		ep := s.refusing[g]
		if ep == nil {
			ep = &episode{since: now, logged: now}
			s.refusing[g] = ep
			s.Log.Error(s.name()+" refuses points for their content; they go to quarantine until it takes them again",
				"measurement", g.measurement, "server", g.server, "points", n, "err", t.reasons[g])
		}
		ep.points += n
		ep.last, ep.reason = now, t.reasons[g]
		if now.Sub(ep.logged) >= summaryEvery {
			ep.logged = now
			s.Log.Error(s.name()+" still refuses points; they go to quarantine", "measurement", g.measurement,
				"server", g.server, "refused_points", ep.points, "since", ep.since.UTC().Format(time.RFC3339), "err", ep.reason)
		}
	}
	if len(s.refusing) > 0 && len(t.accepted) > 0 {
		for _, run := range t.accepted {
			eachLine(run, func(l []byte) {
				if g := groupOf(l); t.refused[g] == 0 && s.refusing[g] != nil {
					s.endLocked(g, now, s.name()+" takes the points again")
				}
			})
		}
	}
	for g, ep := range s.refusing {
		if now.Sub(ep.last) > s.staleAfter() {
			s.endLocked(g, now, "no point refused for a while: the episode is over")
		}
	}
}

func (s *Sender) endLocked(g group, now time.Time, msg string) {
	ep := s.refusing[g]
	delete(s.refusing, g)
	s.Log.Info(msg, "measurement", g.measurement, "server", g.server, "refused_points", ep.points,
		"since", ep.since.UTC().Format(time.RFC3339), "lasted", now.Sub(ep.since).Round(time.Second).String())
}

func (s *Sender) staleAfter() time.Duration {
	if s.StaleAfter > 0 {
		return s.StaleAfter
	}
	return defaultStaleAfter
}

// refusalsLocked lists the ongoing episodes, by measurement and server.
func (s *Sender) refusalsLocked(now time.Time) []Refusal {
	var out []Refusal
	for g, ep := range s.refusing {
		if now.Sub(ep.last) > s.staleAfter() {
			continue
		}
		out = append(out, Refusal{Measurement: g.measurement, Server: g.server, Points: ep.points,
			Since: ep.since, Last: ep.last, Reason: ep.reason})
	}
	slices.SortFunc(out, func(a, b Refusal) int {
		return strings.Compare(a.Measurement+"\x00"+a.Server, b.Measurement+"\x00"+b.Server)
	})
	return out
}

// eachLine calls f with each non-empty line of lines, without its newline.
func eachLine(lines []byte, f func([]byte)) {
	for len(lines) > 0 {
		l, rest, _ := bytes.Cut(lines, []byte("\n"))
		if len(l) > 0 {
			f(l)
		}
		lines = rest
	}
}

// groupOf reads the measurement and the server tag of a line of line
// protocol, as far as it can: a line InfluxDB could not parse is grouped
// by what it starts with.
func groupOf(line []byte) group {
	i, m := lpToken(line, 0, ", ")
	g := group{measurement: shorten(m, 64)}
	for i < len(line) && line[i] == ',' {
		var k, v string
		i, k = lpToken(line, i+1, "=, ")
		if i >= len(line) || line[i] != '=' {
			break
		}
		i, v = lpToken(line, i+1, ", ")
		if k == schema.TagServer {
			g.server = shorten(v, MaxTagBytes)
		}
	}
	return g
}

// lpToken reads from line[i] to the first unescaped byte of stop, and
// returns where it stopped and what it read, unescaped.
func lpToken(line []byte, i int, stop string) (int, string) {
	var b strings.Builder
	for ; i < len(line); i++ {
		c := line[i]
		if c == '\\' && i+1 < len(line) && strings.IndexByte(",= ", line[i+1]) >= 0 {
			i++
			b.WriteByte(line[i])
			continue
		}
		if strings.IndexByte(stop, c) >= 0 {
			break
		}
		b.WriteByte(c)
	}
	return i, b.String()
}

// shorten cuts s to at most n bytes of whole characters, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	k := n - len(cutSep)
	for k > 0 && !utf8.RuneStart(s[k]) {
		k--
	}
	return s[:k] + cutSep
}

// shortReason is InfluxDB's message cut to its start and its end: it
// quotes a refused line whole (64 KiB for a long key), and says why at
// the end.
func shortReason(msg string) string {
	if len(msg) <= maxReason {
		return msg
	}
	tail := msg[len(msg)-maxReason/3:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return shorten(msg, maxReason-len(tail)) + tail
}
