package gateway

import "sync/atomic"

// Quarantine ends a session's egress after a blocked credential leak, when
// credentials.quarantineOnLeak is set: an agent caught exfiltrating once
// gets no second try through another channel. The zero value and a nil
// *Quarantine never quarantine.
type Quarantine struct {
	enabled bool
	hit     atomic.Bool
}

// NewQuarantine returns a Quarantine that acts only when enabled.
func NewQuarantine(enabled bool) *Quarantine { return &Quarantine{enabled: enabled} }

// Leak records a blocked leak.
func (q *Quarantine) Leak(credential string) {
	if q != nil && q.enabled {
		q.hit.Store(true)
	}
}

// Active reports whether the session is quarantined.
func (q *Quarantine) Active() bool { return q != nil && q.hit.Load() }
