package credentials

import (
	"errors"
	"fmt"
)

// ErrEmptySecret is wrapped when a credential's source yields nothing: an
// unset or empty variable, an empty file, a command with no output, or an
// extract group that matched the empty string.
var ErrEmptySecret = errors.New("secret is empty")

// ErrBadSpec is wrapped when a Spec is malformed: an unknown mode or source
// kind, an invalid inject-host pattern, an extract regex that does not
// compile or has no capture group.
var ErrBadSpec = errors.New("bad credential spec")

// ErrExtractNoMatch is wrapped when an extract regex finds nothing and
// OnExtractNoMatch is "error".
var ErrExtractNoMatch = errors.New("extract regex matched nothing")

// ErrCommand is wrapped when a command source fails, times out or cannot be
// started. Its output is never part of the error: it may hold the secret.
var ErrCommand = errors.New("credential command failed")

// ErrTooShort is wrapped when a secret has too few letters and digits to
// make a sentinel that cannot be guessed or confused with ordinary text.
var ErrTooShort = errors.New("secret too short to mask")

// ErrSigV4Streaming is wrapped when a SigV4 request uses a STREAMING-*
// payload, whose chunk signatures chain off the sentinel key and cannot be
// re-signed without rewriting the body, and passthrough is off.
var ErrSigV4Streaming = errors.New("streaming SigV4 payload cannot be re-signed")

// ErrSigV4Presigned is wrapped when a presigned URL (X-Amz-Credential in the
// query) carries a sentinel key and passthrough is off.
var ErrSigV4Presigned = errors.New("presigned SigV4 URL cannot be re-signed")

// ErrSigV4A is wrapped when a SigV4A (ECDSA) request carries a sentinel key
// and passthrough is off.
var ErrSigV4A = errors.New("SigV4A request cannot be re-signed")

// ErrBadSigV4 is wrapped when a SigV4 request carrying a sentinel key is
// malformed: a bad credential scope, a missing or inconsistent X-Amz-Date,
// an invalid payload hash, or a body too large to hash.
var ErrBadSigV4 = errors.New("malformed SigV4 request")

// LeakError reports a sentinel or secret headed for a host its credential is
// not bound to. It names the credential and where it was found, never the
// value. The gateway answers it with X-Proxy-Error: blocked-credential-leak.
type LeakError struct {
	// Credential is the binding's Name.
	Credential string
	// Where is the part of the request it was found in: "header NAME",
	// "header-name", "basic-auth", "url-host", "url-userinfo", "url-path",
	// "url-query", "body", "host".
	Where string
}

func (e *LeakError) Error() string {
	return fmt.Sprintf("credential %s would leak via %s to a host it is not bound to", e.Credential, e.Where)
}

// PlaintextError reports a credential that would be injected into a plain
// http request while allowPlaintextInject is off: on the wire it would be
// readable by anyone on the path.
type PlaintextError struct {
	// Credential is the binding's Name.
	Credential string
}

func (e *PlaintextError) Error() string {
	return fmt.Sprintf("credential %s: refusing to inject over plain http (allowPlaintextInject is off)", e.Credential)
}

// SourceError reports a credential whose secret could not be loaded. It
// wraps the cause (ErrEmptySecret, ErrCommand, ErrBadSpec, a *fs.PathError
// …) and names the credential, never its value.
type SourceError struct {
	// Credential is Spec.Name.
	Credential string
	// Err is the cause.
	Err error
}

func (e *SourceError) Error() string { return "credential " + e.Credential + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SourceError) Unwrap() error { return e.Err }

// SigV4Error reports a SigV4 request with a sentinel key that could not be
// re-signed. It wraps one of the ErrSigV4* or ErrBadSigV4 errors.
type SigV4Error struct {
	// Credential is the Name of the access key ID binding.
	Credential string
	// Err is the cause.
	Err error
}

func (e *SigV4Error) Error() string { return "credential " + e.Credential + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *SigV4Error) Unwrap() error { return e.Err }
