package logline

import "testing"

// Every expression compiles: compiled on first use, a broken one would
// otherwise show only on the first line of its engine.
func TestLazyExpressionsCompile(t *testing.T) {
	for i, l := range []lazyRE{ansi, vllmStat, sglDecode, sglPrefill, sglPrefix, sglRank, llamaHeader, llamaProgress, tgiSuccess, lmdeployPrefix, lmdeployNew, lmdeployOld, trtIterJSON, trtStamp, trtIter, trtStep, trtSched, trtStates, ginLine, rfc3339, isoSpace, syslogStamp, glogStamp, timeOfDay, pyLogComma} {
		if l.re() == nil {
			t.Errorf("expression %d did not compile", i)
		}
	}
}
