package config

import (
	"os"
	"reflect"
	"slices"
	"testing"
)

// The sample configuration that packaging ships must load as it is, and
// say the defaults: every key, with Default's value, but for the file
// sink, which the package points nowhere (NoFileSink).
func TestShippedSampleConfigLoads(t *testing.T) {
	clearEnv(t)
	t.Setenv("STATE_DIRECTORY", "")
	cfg, err := Load("../../packaging/tpsmon.yaml", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Host, _ = os.Hostname()
	want.Sink.File.Path = NoFileSink
	got := *cfg
	got.file, got.fileKeys = "", nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sample config:\n got %+v\nwant %+v", got, want)
	}
	for _, k := range typeKeys(t, reflect.TypeOf(Config{}), "") {
		if !slices.Contains(cfg.fileKeys, k) {
			t.Errorf("the sample does not show key %s", k)
		}
	}
}
