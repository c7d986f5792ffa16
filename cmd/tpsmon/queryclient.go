package main

import (
	"fmt"
	"net/http"

	"github.com/tpsmon/tpsmon/report"
	"github.com/tpsmon/tpsmon/sink"
)

// queryClient returns the InfluxQL client of report and rollup for the
// configured InfluxDB, with the same TLS settings the writer uses (a
// private CA, or checks off when the operator said so).
func queryClient(ic sink.InfluxConfig, token string) (*report.Client, error) {
	c := report.NewClient(ic.URL, ic.Bucket, token, ic.Timeout)
	tc, err := ic.TLS.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("sink.influx: %w", err)
	}
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		c.HTTP.Transport = t
	}
	return c, nil
}
