package config

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/viper"
)

// ErrReloadDropsKeys is why a reload is refused that would put keys the
// running file sets back to their defaults.
var ErrReloadDropsKeys = errors.New("the new file drops keys the running file sets")

// File is the configuration file c was read from; "" when none was (no
// file at the default path: defaults, environment and flags only).
func (c *Config) File() string { return c.file }

// keysOf lists the keys a YAML file sets, as dotted paths through its
// mappings (gpu.backend, sink.influx.url), sorted. A list is one key
// (servers, gpu.devices): its entries are its value, not keys.
func keysOf(b []byte) []string {
	v := viper.New()
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(b)); err != nil {
		return nil // Load has refused such a file already
	}
	keys := v.AllKeys()
	slices.Sort(keys)
	return keys
}

// CheckReload says whether next may replace running on a reload: all or
// nothing, never a silent fall back to defaults. Every key the running
// file sets must be set by the new file too (to any valid value); a key
// set in the running file and absent from the new one is refused, named,
// since an empty mapping, a truncated save or an editor's half-written
// file would otherwise reset it (gpu.backend to nvml, servers to none).
// Lists are values: removing a server from servers is a change like any
// other. A running configuration read from no file accepts any file.
func CheckReload(running, next *Config) error {
	if running.file == "" {
		return nil
	}
	if next.file == "" {
		return fmt.Errorf("%w: %s is gone; a reload does not fall back to the defaults (restart to run on them)",
			ErrReloadDropsKeys, running.file)
	}
	var dropped []string
	for _, k := range running.fileKeys {
		if !covered(next.fileKeys, k) {
			dropped = append(dropped, k)
		}
	}
	if len(dropped) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s no longer sets %s; a reload does not put keys back to their defaults "+
		"(write each with the value wanted, or restart to take the file as it is)",
		ErrReloadDropsKeys, next.file, strings.Join(dropped, ", "))
}

// covered tells whether keys set key: itself, or a key under it
// (gpu: {backend: sim} where the running file had gpu: null).
func covered(keys []string, key string) bool {
	return slices.ContainsFunc(keys, func(k string) bool { return k == key || strings.HasPrefix(k, key+".") })
}
