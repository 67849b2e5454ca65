// Package mitm terminates TLS for inspected hosts and applies per-request
// rules (network.rules) and git smart-HTTP rules (network.git) before it
// forwards a request upstream through the policy-checked dialer.
//
// The decision is pure: CompileRules builds a RuleSet, RuleSet.Check
// decides a RequestInfo, ParsePushCommands and GitOp.Permits judge a git
// push. The Interceptor does the I/O: it serves one client connection the
// gateway has answered CONNECT for, with a leaf from the ca package, and
// forwards allowed requests with an http.Transport that can only reach the
// destination of the policy decision.
package mitm
