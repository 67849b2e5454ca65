package gateway

import (
	"fmt"
	"sync"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// Budget limits one session's traffic to the hosts a pattern matches
// (network.budgets). A negative limit is unlimited. "Session" is one client:
// the whole `moat run`, or one token of the daemon.
type Budget struct {
	Pattern   string // host pattern, allow-list syntax
	Requests  int64  // connections plus HTTP requests (plain, or inside terminated TLS)
	BytesUp   int64
	BytesDown int64
}

type budgetRule struct {
	Budget
	pat canon.Pattern
}

type usage struct{ requests, up, down int64 }

// budgets tracks usage per client and rule.
type budgets struct {
	rules []budgetRule
	mu    sync.Mutex
	used  map[string][]usage // client → one usage per rule
}

func newBudgets(bs []Budget) (*budgets, error) {
	if len(bs) == 0 {
		return nil, nil
	}
	b := &budgets{used: make(map[string][]usage)}
	for i, x := range bs {
		p, err := canon.ParsePattern(x.Pattern, false)
		if err != nil {
			return nil, fmt.Errorf("network.budgets[%d].host: %w", i, err)
		}
		b.rules = append(b.rules, budgetRule{Budget: x, pat: p})
	}
	return b, nil
}

// admit counts one request against every matching rule, or refuses it when
// a rule is spent. It returns the indexes to charge bytes to later.
func (b *budgets) admit(client string, d policy.Decision) (matched []int, spent *Budget) {
	if b == nil {
		return nil, nil
	}
	for i := range b.rules {
		if b.rules[i].pat.Match(d.Host, d.Port) {
			matched = append(matched, i)
		}
	}
	if len(matched) == 0 {
		return nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.used[client]
	if u == nil {
		u = make([]usage, len(b.rules))
		b.used[client] = u
	}
	for _, i := range matched {
		r := &b.rules[i]
		if (r.Requests >= 0 && u[i].requests >= r.Requests) ||
			(r.BytesUp >= 0 && u[i].up >= r.BytesUp) ||
			(r.BytesDown >= 0 && u[i].down >= r.BytesDown) {
			return nil, &r.Budget
		}
	}
	for _, i := range matched {
		u[i].requests++
	}
	return matched, nil
}

// charge adds the bytes of a finished connection or request.
func (b *budgets) charge(client string, matched []int, up, down int64) {
	if b == nil || len(matched) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.used[client]
	for _, i := range matched {
		u[i].up += up
		u[i].down += down
	}
}

// mitmHook counts the requests inside terminated TLS connections.
func (b *budgets) mitmHook() func(client string, d policy.Decision) (func(up, down int64), string) {
	return func(client string, d policy.Decision) (func(up, down int64), string) {
		matched, spent := b.admit(client, d)
		if spent != nil {
			return nil, spent.Pattern
		}
		return func(up, down int64) { b.charge(client, matched, up, down) }, ""
	}
}

const reasonBudget = "budget-exhausted"

func budgetReply(bg *Budget) reply {
	r := noInterceptorReply()
	r.header.Set("X-Moat-Reason", reasonBudget)
	r.header.Set("X-Moat-Rule", "budget:"+bg.Pattern)
	r.body = fmt.Sprintf("Connection blocked: this session's budget for %s is spent (network.budgets)\n", bg.Pattern)
	return r
}
