// Package nvml is the GPU backend on real hardware: the go-nvml adapter
// that fills a sample.GPU for each device.
//
// Only this package imports go-nvml, so consumers never see its types.
package nvml

import (
	"errors"

	"github.com/tpsmon/tpsmon/sample"
)

// ErrNoDriver means the NVIDIA driver library could not be loaded or
// initialised: the node has no usable GPU for tpsmon.
var ErrNoDriver = errors.New("no NVIDIA driver found")

// fieldSamples marks, in a device's unsupported set, the driver's
// utilization sample buffer: the adapter's own bit, beyond gpu's fields.
const fieldSamples = sample.FieldGPM << 1
