package sink

import (
	"testing"
	"time"

	"github.com/tpsmon/tpsmon/sink/spool"
)

// realSender is a Sender that delivers from a spool opened with opts to
// database db of the real InfluxDB at base; both are closed with the test.
func realSender(t *testing.T, base, db string, opts spool.Options) (*spool.Spool, *Sender) {
	t.Helper()
	sp, err := spool.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	in, err := NewInflux(InfluxConfig{URL: base, Bucket: db + "/autogen", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return sp, &Sender{Spool: sp, W: in, Log: quiet()}
}
