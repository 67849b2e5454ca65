package resolver

import (
	"container/list"
	"net/netip"
	"sync"
	"time"
)

// cacheEntry is one cached answer: addresses, or a *NotFoundError for a
// negative answer.
type cacheEntry struct {
	name    string
	addrs   []netip.Addr
	err     error
	expires time.Time
}

// cache is a TTL cache bounded in entries. When full it evicts the entry
// inserted longest ago: simple and, unlike LRU, not steerable by a client
// that keeps touching names to keep them in.
type cache struct {
	mu    sync.Mutex
	max   int
	m     map[string]*list.Element // value: *cacheEntry
	order *list.List               // front is the oldest insertion
}

func newCache(max int) *cache {
	return &cache{max: max, m: make(map[string]*list.Element), order: list.New()}
}

// get returns the live entry for name, dropping it if it has expired.
func (c *cache) get(name string, now time.Time) (*cacheEntry, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[name]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.order.Remove(el)
		delete(c.m, name)
		return nil, false
	}
	return e, true
}

// put stores e, replacing an older entry for the same name, and evicts the
// oldest entries beyond the bound.
func (c *cache) put(e *cacheEntry) {
	if c == nil || c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[e.name]; ok {
		c.order.Remove(el)
	}
	c.m[e.name] = c.order.PushBack(e)
	for c.order.Len() > c.max {
		old := c.order.Front()
		c.order.Remove(old)
		delete(c.m, old.Value.(*cacheEntry).name)
	}
}

// len is the number of entries, expired or not.
func (c *cache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
