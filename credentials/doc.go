// Package credentials keeps real secrets out of the sandbox.
//
// Each masked credential is read once on the host (from moat's own
// environment, a file or a command) and replaced inside the sandbox by a
// sentinel: a random token as long as the secret, so that Content-Length
// never changes when the gateway swaps it back. On the way out, Apply swaps
// the sentinel for the secret only when the canonical destination host is
// bound to that credential, and reports a LeakError when a sentinel (or the
// secret itself) is headed anywhere else. AWS SigV4 requests, which are
// signed with the sentinel key and cannot be swapped textually, are
// re-signed with the real pair by ResignAWS.
//
// The package knows nothing of the gateway or the config file: the caller
// maps its settings onto Spec values. No type in it ever prints a secret or
// a sentinel, whatever the fmt verb.
package credentials
