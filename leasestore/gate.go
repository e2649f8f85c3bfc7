package leasestore

import "sync/atomic"

// gate counts a Store's calls in flight, so that Close can refuse new
// calls and wait for those in flight before it closes the driver: two
// atomic additions per call, no lock and no allocation on the hot path.
type gate struct {
	// state is gateClosed once closed, plus the calls in flight (including
	// refused ones, for the moment they are counted).
	state atomic.Int64
	// drained gets a token when the last call in flight leaves a closed
	// gate; only the close that closed the gate takes it.
	drained chan struct{}
}

// gateClosed is the bit of gate.state set by close.
const gateClosed = 1 << 62

// enter admits a call unless the gate is closed; an admitted call leaves
// when it returns.
func (g *gate) enter() bool {
	if g.state.Add(1)&gateClosed != 0 {
		g.leave()
		return false
	}
	return true
}

// leave ends a call, telling close when it was the last one in flight.
func (g *gate) leave() {
	if g.state.Add(-1) == gateClosed {
		select {
		case g.drained <- struct{}{}:
		default:
		}
	}
}

// close refuses new calls and waits for those in flight; false when the
// gate was closed already.
func (g *gate) close() bool {
	old := g.state.Or(gateClosed)
	if old&gateClosed != 0 {
		return false
	}
	if old != 0 {
		<-g.drained
	}
	return true
}
