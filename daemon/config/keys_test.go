package config

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// typeKeys lists the keys Config's type declares, by walking its fields'
// mapstructure tags on its own (not keys' walk of Default): a struct is a
// level, anything else a key. A field without a tag is reported.
func typeKeys(t *testing.T, typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("mapstructure")
		switch {
		case tag == "-":
			continue
		case tag == "":
			t.Errorf("%s%s (%s.%s) has no mapstructure tag: give it its key", prefix, strings.ToLower(f.Name), typ.Name(), f.Name)
			continue
		}
		if f.Type.Kind() == reflect.Struct && tag == ",squash" {
			out = append(out, typeKeys(t, f.Type, prefix)...) // an embedded struct's keys are its parent's
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, typeKeys(t, f.Type, prefix+tag+".")...)
			continue
		}
		out = append(out, prefix+tag)
	}
	return out
}

// Every key Config declares has a default viper knows (so TPSMON_*
// variables reach it, and UnknownEnv knows its variable), and every
// default viper holds names a key: the two come from one declaration
// (Default and the tags), and this holds them to it.
func TestKeysHaveDefaults(t *testing.T) {
	want := typeKeys(t, reflect.TypeOf(Config{}), "")
	v, err := newViper(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := v.AllKeys()
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("key %s has no default", k)
		}
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			t.Errorf("default %s names no key of Config", k)
		}
	}
	if len(want) < 30 {
		t.Errorf("only %d keys found: %v", len(want), want)
	}
}

// With no file, variable or flag, Load gives Default, filled in only
// where validate fills (the host name): the defaults reach viper and come
// back unchanged, durations and sizes included.
func TestLoadWithNothingIsDefault(t *testing.T) {
	clearEnv(t)
	t.Setenv("STATE_DIRECTORY", "")
	got, err := Load("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Host, _ = os.Hostname()
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("Load with nothing:\n got %+v\nwant %+v", *got, want)
	}
	if want.Window != 10*time.Second || want.Sink.Spool.MaxBytes != 1<<30 {
		t.Errorf("defaults: window %v, spool %d", want.Window, want.Sink.Spool.MaxBytes)
	}
}

// Each key's TPSMON_* variable is known to UnknownEnv; a misspelt one is
// not.
func TestUnknownEnvKnowsEveryKey(t *testing.T) {
	clearEnv(t)
	for _, k := range typeKeys(t, reflect.TypeOf(Config{}), "") {
		t.Setenv("TPSMON_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_")), "x")
	}
	t.Setenv("TPSMON_SINK_INFLUX_TOKEN", "x")
	if got := UnknownEnv(); !slices.Equal(got, []string{"TPSMON_SINK_INFLUX_TOKEN"}) {
		t.Errorf("UnknownEnv() = %v, want only TPSMON_SINK_INFLUX_TOKEN", got)
	}
}

// clearEnv unsets the TPSMON_* variables for the test.
func clearEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "TPSMON_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
}

// Environment variables are text: a list of numbers or a number set from
// one reads as the file's would, and text that is no number is refused
// naming the key.
func TestEnvNumbers(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "")
	for _, tc := range []struct {
		env, val string
		check    func(*Config) bool
		fail     string
	}{
		{"TPSMON_DISCOVERY_PORTS", "8000,9000", func(c *Config) bool { return fmt.Sprint(c.Discovery.Ports) == "[8000 9000]" }, ""},
		{"TPSMON_DISCOVERY_PORTS", "8000", func(c *Config) bool { return fmt.Sprint(c.Discovery.Ports) == "[8000]" }, ""},
		{"TPSMON_DISCOVERY_PORTS", "8000,x", nil, "ports"},
		{"TPSMON_DISCOVERY_PORTS", "8000,99999", nil, "99999"},
		{"TPSMON_HTTP_MAX_CONNECTIONS", "50", func(c *Config) bool { return c.HTTP.MaxConnections == 50 }, ""},
		{"TPSMON_HTTP_MAX_CONNECTIONS", "fifty", nil, "max_connections"},
		{"TPSMON_SINK_OTLP_HEADERS", "Authorization: Bearer x,X-Scope-OrgID: t", func(c *Config) bool {
			return fmt.Sprintf("%q", c.Sink.OTLP.Headers) == `["Authorization: Bearer x" "X-Scope-OrgID: t"]`
		}, ""},
		{"TPSMON_SINK_OTLP_ENDPOINT", "http://127.0.0.1:4318", func(c *Config) bool { return c.Sink.OTLP.Endpoint == "http://127.0.0.1:4318" }, ""},
	} {
		t.Run(tc.env+"="+tc.val, func(t *testing.T) {
			t.Setenv(tc.env, tc.val)
			c, err := Load("", false, nil)
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("Load: %v, want an error naming %q", err, tc.fail)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Load: %v, %+v", err, c)
			}
		})
	}
}
