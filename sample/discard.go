package sample

import (
	"math"
)

// Reason says why a value was discarded.
type Reason int

// The reasons a value is discarded.
const (
	NotANumber Reason = iota // NaN
	Infinite                 // ±Inf
	Negative                 // below zero, which no count or gauge can be
	Huge                     // beyond its kind's physical bound
	Jump                     // a counter grew faster than the bound allows
	Flap                     // a counter fell and the next reading did not confirm a restart
	OutOfRange               // a time outside [MinTime, MaxTime], a reading below its range
	// Suspect: a counter that cannot be one process's (several replicas
	// behind one URL, a page that flaps): its readings are not trusted.
	Suspect
	NumReasons
)

var reasonNames = [NumReasons]string{"nan", "inf", "negative", "huge", "jump", "flap", "range", "suspect"}

func (r Reason) String() string { return reasonNames[r] }

// Discard is one value a check refused: a Guard (collector), CheckInterval,
// a GPU sample's Check.
type Discard struct {
	Series string // the counter or gauge, as named by String
	Reason Reason
}

// RangeReason says why v is no reading in [lo, hi], if it is not: NaN,
// ±Inf, below zero where lo is not (Negative), below lo (OutOfRange), or
// above hi (Huge).
func RangeReason(v, lo, hi float64) (Reason, bool) {
	switch {
	case math.IsNaN(v):
		return NotANumber, false
	case math.IsInf(v, 0):
		return Infinite, false
	case v < 0 && lo >= 0:
		return Negative, false
	case v < lo:
		return OutOfRange, false
	case v > hi:
		return Huge, false
	}
	return 0, true
}
