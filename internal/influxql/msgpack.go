package influxql

import (
	"errors"
	"fmt"
	"io"

	"github.com/tinylib/msgp/msgp"
)

// ContentTypeMsgpack is the answer InfluxDB 1.x sends for Accept:
// application/x-msgpack: the JSON answer's shape in MessagePack. InfluxDB
// writes it without escaping each string and number as JSON needs, and it
// reads back without unescaping: a 90-day range of a fleet's curve
// rollups (31 MB of strings) took InfluxDB 0.45-1.05 s as JSON and
// 0.11-0.17 s as MessagePack.
const ContentTypeMsgpack = "application/x-msgpack"

// EachMsgpack is Each for a MessagePack answer.
func EachMsgpack(r io.Reader, each func(Series) error) error {
	src := &readErr{r: r}
	a := &packed{r: msgp.NewReader(src), each: each}
	err := a.top()
	if err == nil {
		if _, e := a.r.NextType(); !errors.Is(e, io.EOF) {
			err = fmt.Errorf("%w: more after the answer", ErrUndecodable)
		}
	}
	return outcome(err, src, a.eachErr, a.reqErr, a.stmtErr)
}

// packed walks one MessagePack answer as answer walks a JSON one.
type packed struct {
	r       *msgp.Reader
	each    func(Series) error
	eachErr error
	reqErr  string
	stmtErr string
}

// undecodable marks err (nil: none) as the answer's fault.
func (a *packed) undecodable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUndecodable, err)
}

// object reads a map's keys, handing each key's value to field.
func (a *packed) object(field func(key string) error) error {
	n, err := a.r.ReadMapHeader()
	if err != nil {
		return a.undecodable(err)
	}
	for i := uint32(0); i < n; i++ {
		key, err := a.r.ReadString()
		if err != nil {
			return a.undecodable(err)
		}
		if err := field(key); err != nil {
			return err
		}
	}
	return nil
}

// array reads an array, handing each item's index to item.
func (a *packed) array(item func(i int) error) error {
	n, err := a.r.ReadArrayHeader()
	if err != nil {
		return a.undecodable(err)
	}
	for i := 0; i < int(n); i++ {
		if err := item(i); err != nil {
			return err
		}
	}
	return nil
}

func (a *packed) skip() error {
	if err := a.r.Skip(); err != nil {
		return a.undecodable(err)
	}
	return nil
}

func (a *packed) text(dst *string) error {
	s, err := a.r.ReadString()
	if err != nil {
		return a.undecodable(err)
	}
	*dst = s
	return nil
}

func (a *packed) top() error {
	return a.object(func(key string) error {
		switch key {
		case "results":
			return a.array(func(i int) error {
				if i > 0 { // one statement per query: a later one is read past
					return a.skip()
				}
				return a.object(func(key string) error {
					switch key {
					case "series":
						return a.array(func(int) error { return a.series() })
					case "error":
						return a.text(&a.stmtErr)
					}
					return a.skip()
				})
			})
		case "error":
			return a.text(&a.reqErr)
		}
		return a.skip()
	})
}

// series reads one series whole and hands it on.
func (a *packed) series() error {
	var s Series
	err := a.object(func(key string) error {
		switch key {
		case "name":
			return a.text(&s.Name)
		case "tags":
			s.Tags = map[string]string{}
			return a.object(func(k string) error {
				var v string
				err := a.text(&v)
				s.Tags[k] = v
				return err
			})
		case "columns":
			return a.array(func(int) error {
				var c string
				err := a.text(&c)
				s.Columns = append(s.Columns, c)
				return err
			})
		case "values":
			return a.array(func(int) error {
				row := make([]any, 0, len(s.Columns))
				err := a.array(func(int) error {
					v, err := a.cell()
					row = append(row, v)
					return err
				})
				s.Values = append(s.Values, row)
				return err
			})
		}
		return a.skip()
	})
	if err != nil {
		return err
	}
	if err := a.each(s); err != nil {
		a.eachErr = err
		return errFromEach
	}
	return nil
}

// cell reads one value: a number (int64, uint64 or float64), a string,
// a bool or nil; anything else is no cell of an answer.
func (a *packed) cell() (any, error) {
	t, err := a.r.NextType()
	if err != nil {
		return nil, a.undecodable(err)
	}
	switch t {
	case msgp.NilType:
		return nil, a.undecodable(a.r.ReadNil())
	case msgp.Float32Type, msgp.Float64Type:
		v, err := a.r.ReadFloat64()
		return v, a.undecodable(err)
	case msgp.IntType, msgp.UintType, msgp.StrType, msgp.BoolType:
		v, err := a.r.ReadIntf()
		return v, a.undecodable(err)
	}
	return nil, a.undecodable(fmt.Errorf("a %s where a cell was due", t))
}
