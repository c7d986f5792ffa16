package report

import (
	"context"
	"fmt"
	"sync"

	"github.com/tpsmon/tpsmon/internal/influxql"
)

// opener is what reading answers as they stream needs of a querier
// (Client has it); a querier without it is read whole.
type opener interface {
	Open(ctx context.Context, q string) (*Answer, error)
}

// stream is an answer a step reads: Each hands its series on and ends
// it, Close drops it unread.
type stream interface {
	Each(func(influxql.Series) error) error
	Close()
}

// held is an answer read whole (of a querier that cannot stream).
type held []influxql.Series

func (h held) Each(each func(influxql.Series) error) error {
	for _, s := range h {
		if err := each(s); err != nil {
			return err
		}
	}
	return nil
}

func (held) Close() {}

// open sends q and returns its answer begun.
func open(ctx context.Context, c querier, q string) (stream, error) {
	if o, ok := c.(opener); ok {
		a, err := o.Open(ctx, q)
		if err != nil {
			return nil, err // not a nil *Answer in a stream
		}
		return a, nil
	}
	s, err := c.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	return held(s), nil
}

// ahead opens a report's queries before its steps read them, at most
// InFlight being run by InfluxDB at once: a query leaves the count when
// its answer begins, and waits, unread, in InfluxDB and the socket until
// its step reads it, so that the report's heap holds one series at a
// time however large the fleet, and the steps' order needs no care. The
// first error cancels the rest and is the report's: with InfluxDB down
// or hung, one timeout, not one per query.
type ahead struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	byText map[string][]*pending // not yet taken, in the order given
	all    []*pending
}

// pending is one query opened ahead; a and err are set before done is
// closed.
type pending struct {
	done chan struct{}
	a    stream
	err  error
}

// openAhead starts opening fs in order; close ends it.
func openAhead(ctx context.Context, c querier, fs []fetch) *ahead {
	a := &ahead{byText: map[string][]*pending{}}
	a.ctx, a.cancel = context.WithCancelCause(ctx)
	for _, f := range fs {
		p := &pending{done: make(chan struct{})}
		a.byText[f.text] = append(a.byText[f.text], p)
		a.all = append(a.all, p)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		sem := make(chan struct{}, InFlight)
		for i, f := range fs {
			p := a.all[i]
			select {
			case sem <- struct{}{}:
			case <-a.ctx.Done():
				p.err = context.Cause(a.ctx)
				close(p.done)
				continue
			}
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				p.a, p.err = open(withName(a.ctx, f.name), c, f.text)
				<-sem
				if p.err != nil {
					a.cancel(fmt.Errorf("%s: %w", f.name, p.err))
				}
				close(p.done)
			}()
		}
	}()
	return a
}

// take returns the answer of text opened ahead, the first not taken
// yet; false: text was not among them.
func (a *ahead) take(text string) (stream, bool, error) {
	a.mu.Lock()
	ps := a.byText[text]
	if len(ps) == 0 {
		a.mu.Unlock()
		return nil, false, nil
	}
	p := ps[0]
	a.byText[text] = ps[1:]
	a.mu.Unlock()
	<-p.done
	if p.err != nil {
		if c := context.Cause(a.ctx); c != nil {
			return nil, true, c // the first error, which ended the rest
		}
		return nil, true, p.err
	}
	s := p.a
	p.a = nil // the step owns it now
	return s, true, nil
}

// close cancels what is still being opened, waits for it and drops the
// answers no step took.
func (a *ahead) close() {
	a.cancel(context.Canceled)
	a.wg.Wait()
	for _, p := range a.all {
		if p.a != nil {
			p.a.Close()
		}
	}
}
