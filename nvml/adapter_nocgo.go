//go:build !cgo

package nvml

import (
	"fmt"
	"time"

	"github.com/tpsmon/tpsmon/sample"
)

// Sampler is unavailable in a build without cgo: go-nvml needs it.
type Sampler struct{}

// OpenSystem always fails without cgo.
func OpenSystem([]string) (*Sampler, error) {
	return nil, fmt.Errorf("%w: tpsmon was built without cgo, which NVML needs", ErrNoDriver)
}

// Devices returns 0.
func (*Sampler) Devices() int { return 0 }

// Sample returns nothing.
func (*Sampler) Sample(time.Time) []sample.GPU { return nil }

// Facts returns nothing.
func (*Sampler) Facts() []sample.Device { return nil }

// Close does nothing.
func (*Sampler) Close() error { return nil }

// Processes returns nothing.
func (*Sampler) Processes() map[string][]int { return nil }
