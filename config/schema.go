// Package config reads moat's settings file: srt's JSON schema (Anthropic
// sandbox-runtime 0.0.7x–0.0.8x, `~/.srt-settings.json`) read by yaml.v3 so
// that YAML works too, plus moat's own keys.
//
// Decoding is strict: an unknown key, a duplicate key or a value of the
// wrong type is an error that names its dotted path
// (`network.allowedDomains[2]`) and, for unknown keys, suggests the key that
// was probably meant. Validate then reports every semantic problem at once,
// and PolicySpec/Compile turn a valid File into the pure policy core's input.
//
// The package reads files only in Load, Find and Resolve; everything else
// works on values.
package config

// File is one settings file. Its zero value (an empty file) is valid and
// closes everything: no domain is reachable and nothing is writable.
//
// Keys that belong to another platform or name binaries moat does not use
// are accepted, type-checked and ignored, so that an srt file loads
// unchanged.
type File struct {
	// Network is the egress policy. Default: closed.
	Network Network `yaml:"network"`
	// Filesystem is the read/write policy. Default: reads open, no writes.
	Filesystem Filesystem `yaml:"filesystem"`
	// Credentials names secrets that are denied or masked inside the
	// sandbox. Default: none.
	Credentials Credentials `yaml:"credentials"`
	// IgnoreViolations maps a command pattern ("*" for all) to paths whose
	// violations are not reported. Default: none.
	IgnoreViolations map[string][]string `yaml:"ignoreViolations"`
	// EnableWeakerNestedSandbox relaxes the sandbox for running inside an
	// unprivileged container (srt's Docker mode). Default: false.
	EnableWeakerNestedSandbox bool `yaml:"enableWeakerNestedSandbox"`
	// MandatoryDenySearchDepth is how many directory levels below each
	// writable root the mandatory write denies are applied (0..10).
	// Default (nil): 3. Use SearchDepth for the effective value.
	MandatoryDenySearchDepth *int `yaml:"mandatoryDenySearchDepth"`
	// Git is srt's git configuration injected through GIT_CONFIG_* env
	// vars. Default: none.
	Git *GitConfig `yaml:"git"`

	// Audit says where the audit log goes (moat). Default: nowhere.
	Audit Audit `yaml:"audit"`
	// DNS configures the resolver (moat). Default: the system's.
	DNS DNS `yaml:"dns"`

	// BwrapPath is srt's bubblewrap binary; moat needs none. Ignored.
	BwrapPath string `yaml:"bwrapPath"`
	// SocatPath is srt's socat binary; moat needs none. Ignored.
	SocatPath string `yaml:"socatPath"`
	// Ripgrep is srt's ripgrep invocation; moat walks the tree in Go. Ignored.
	Ripgrep *Ripgrep `yaml:"ripgrep"`
	// Seccomp is srt's apply-seccomp binary; moat installs its own filter.
	// Ignored.
	Seccomp *Seccomp `yaml:"seccomp"`

	// EnableWeakerNetworkIsolation is macOS only (com.apple.trustd.agent).
	// Ignored on Linux. Default: false.
	EnableWeakerNetworkIsolation bool `yaml:"enableWeakerNetworkIsolation"`
	// AllowAppleEvents is macOS only. Ignored on Linux. Default: false.
	AllowAppleEvents bool `yaml:"allowAppleEvents"`
	// AllowPty is macOS only. Ignored on Linux. Default: false.
	AllowPty bool `yaml:"allowPty"`
	// Windows holds srt's Windows settings. Ignored.
	Windows *Windows `yaml:"windows"`
}

// Network is the `network` section.
type Network struct {
	// AllowedDomains are host patterns that may be reached (§2 pattern
	// syntax, optional :port). Default: none (network closed).
	AllowedDomains []string `yaml:"allowedDomains"`
	// DeniedDomains are host patterns that are always refused; they win
	// over AllowedDomains and also take "*" and "*:PORT". Default: none.
	DeniedDomains []string `yaml:"deniedDomains"`
	// DeniedDomainReasons is the text shown for a deny, keyed by the exact
	// DeniedDomains entry. Default: "host is on the deny list".
	DeniedDomainReasons map[string]string `yaml:"deniedDomainReasons"`
	// StrictAllowlist denies whatever no list matched without asking.
	// Default: false (but with no ask hook the answer is deny anyway).
	StrictAllowlist bool `yaml:"strictAllowlist"`
	// AllowAllDomains allows every host not on the deny list (srt 0.0.8x).
	// Resolved addresses are still checked. Default: false.
	AllowAllDomains bool `yaml:"allowAllDomains"`
	// AllowUnixSockets are unix socket paths the command may connect to.
	// Default: none.
	AllowUnixSockets []string `yaml:"allowUnixSockets"`
	// AllowAllUnixSockets lifts the AF_UNIX socket ban. Default: false.
	AllowAllUnixSockets bool `yaml:"allowAllUnixSockets"`
	// AllowLocalBinding lets the command listen on local ports.
	// Default: false.
	AllowLocalBinding bool `yaml:"allowLocalBinding"`
	// HTTPProxyPort is an external HTTP proxy on localhost to use instead
	// of moat's gateway (1..65535). Default (nil): moat's gateway.
	HTTPProxyPort *int `yaml:"httpProxyPort"`
	// SOCKSProxyPort is an external SOCKS proxy on localhost to use instead
	// of moat's gateway (1..65535). Default (nil): moat's gateway.
	SOCKSProxyPort *int `yaml:"socksProxyPort"`
	// TLSTerminate turns on TLS termination for every allowed host except
	// its ExcludeDomains. Default (nil): off, except for hosts that need it
	// (rules, git rules, masked credentials).
	TLSTerminate *TLSTerminate `yaml:"tlsTerminate"`
	// ParentProxy is an upstream proxy for outbound connections.
	// Default (nil): dial directly.
	ParentProxy *ParentProxy `yaml:"parentProxy"`
	// MitmProxy is srt's hand-off of some domains to an external MITM proxy
	// over a unix socket. Accepted and ignored: moat terminates TLS itself.
	MitmProxy *MitmProxy `yaml:"mitmProxy"`
	// AllowMachLookup is macOS only (XPC service names). Ignored on Linux.
	AllowMachLookup []string `yaml:"allowMachLookup"`

	// DeniedResolvedAddresses are CIDRs (or bare IPs) refused after DNS, on
	// top of the built-in table (moat). Default: none.
	DeniedResolvedAddresses []string `yaml:"deniedResolvedAddresses"`
	// AllowedResolvedAddresses are CIDRs (or bare IPs) carved out of the
	// built-in denied table, e.g. an internal 10.1.0.0/16 (moat).
	// Default: none.
	AllowedResolvedAddresses []string `yaml:"allowedResolvedAddresses"`
	// Rules are per-request rules for inspected hosts (moat, DESIGN §7).
	// Default: none.
	Rules []Rule `yaml:"rules"`
	// Git are git smart-HTTP fetch/push rules (moat, DESIGN §7).
	// Default: none.
	Git []GitRule `yaml:"git"`
	// Budgets limit each session's requests and bytes per host (moat).
	// Default: none (unlimited).
	Budgets []Budget `yaml:"budgets"`
}

// TLSTerminate is `network.tlsTerminate`.
type TLSTerminate struct {
	// CACertPath is a PEM CA certificate; set with CAKeyPath.
	// Default: moat's CA under ~/.config/moat/ca/.
	CACertPath string `yaml:"caCertPath"`
	// CAKeyPath is the PEM private key of CACertPath. Default: as CACertPath.
	CAKeyPath string `yaml:"caKeyPath"`
	// ExcludeDomains are host patterns (no port) tunnelled without
	// termination, e.g. mTLS or pinned hosts. Default: none.
	ExcludeDomains []string `yaml:"excludeDomains"`
	// ExtraCACertPaths are PEM files added to the sandbox's trust bundle.
	// Default: none.
	ExtraCACertPaths []string `yaml:"extraCaCertPaths"`
	// UpstreamCACertPaths are PEM files trusted, besides the system roots,
	// when verifying upstream servers (moat). Default: none.
	UpstreamCACertPaths []string `yaml:"upstreamCaCertPaths"`
}

// ParentProxy is `network.parentProxy`.
type ParentProxy struct {
	// HTTP is the proxy URL for plain HTTP. Default: none.
	HTTP string `yaml:"http"`
	// HTTPS is the proxy URL for CONNECT traffic. Default: HTTP.
	HTTPS string `yaml:"https"`
	// NoProxy is a comma-separated list of host suffixes and CIDRs dialled
	// directly. Default: none.
	NoProxy string `yaml:"noProxy"`
}

// MitmProxy is srt's `network.mitmProxy`; moat ignores it.
type MitmProxy struct {
	SocketPath string   `yaml:"socketPath"`
	Domains    []string `yaml:"domains"`
}

// Rule is one `network.rules` entry: requests to Host are matched against
// Deny and Allow, and a request that matches neither is denied.
type Rule struct {
	// ID names the rule in audit lines and X-Moat-Rule. Default: none.
	ID string `yaml:"id"`
	// Host is a host pattern (§2 syntax). Required.
	Host string `yaml:"host"`
	// Allow lists the requests that may pass. Default: none.
	Allow []Match `yaml:"allow"`
	// Deny lists requests that are refused even if Allow matches.
	// Default: none.
	Deny []Match `yaml:"deny"`
}

// Match matches one HTTP request. Every field that is set must match.
type Match struct {
	// Method is one method, a list, or "*". Default: every method.
	Method StringList `yaml:"method"`
	// Path is a glob over the decoded path: `*` is one segment, `**` any
	// number. Default: "/**".
	Path string `yaml:"path"`
	// Query maps query keys to value globs ("*" = present). Default: none.
	Query map[string]string `yaml:"query"`
	// Headers maps header names to value globs. Default: none.
	Headers map[string]string `yaml:"headers"`
	// Reason is the text of a deny. Default: "request denied by rule".
	Reason string `yaml:"reason"`
}

// StringList is a string or a list of strings.
type StringList []string

// GitRule is one `network.git` entry.
type GitRule struct {
	// Host is a host pattern (§2 syntax). Required.
	Host string `yaml:"host"`
	// Fetch are "owner/repo" globs (.git optional) that may be cloned or
	// fetched. Default: none.
	Fetch []string `yaml:"fetch"`
	// Push lists the repositories that may be pushed to. Default: none.
	Push []GitPush `yaml:"push"`
}

// GitPush allows pushes to one repository glob.
type GitPush struct {
	// Repo is an "owner/repo" glob. Required.
	Repo string `yaml:"repo"`
	// Refs are ref globs a push may create or update
	// (e.g. "refs/heads/agent/*"). Required, non-empty.
	Refs []string `yaml:"refs"`
	// AllowDelete lets a push delete matching refs. Default: false.
	AllowDelete bool `yaml:"allowDelete"`
	// AllowTags lets a push create or update refs/tags/*. Default: false.
	AllowTags bool `yaml:"allowTags"`
}

// Budget limits one session's traffic to the hosts matching Host. A nil
// limit is unlimited; zero allows none.
type Budget struct {
	// Host is a host pattern (§2 syntax). Required.
	Host string `yaml:"host"`
	// Requests is the number of connections plus inspected requests.
	// Default (nil): unlimited.
	Requests *int64 `yaml:"requests"`
	// BytesUp is the bytes sent upstream. Default (nil): unlimited.
	BytesUp *int64 `yaml:"bytesUp"`
	// BytesDown is the bytes received. Default (nil): unlimited.
	BytesDown *int64 `yaml:"bytesDown"`
}

// Filesystem is the `filesystem` section. Paths may start with "~/".
type Filesystem struct {
	// DenyRead are paths that cannot be read. Default: none.
	DenyRead []string `yaml:"denyRead"`
	// AllowRead re-allow reading inside DenyRead. Default: none.
	AllowRead []string `yaml:"allowRead"`
	// AllowWrite are paths that may be written. Default: none.
	AllowWrite []string `yaml:"allowWrite"`
	// DenyWrite are paths that cannot be written even inside AllowWrite.
	// Default: none.
	DenyWrite []string `yaml:"denyWrite"`
	// AllowGitConfig lets .git/config be written. Default: false.
	AllowGitConfig bool `yaml:"allowGitConfig"`
	// Disabled turns off all filesystem rules, including the mandatory
	// denies. Default: false.
	Disabled bool `yaml:"disabled"`

	// PrivateTmp asks the sandbox to create a private, writable TMPDIR and
	// export it. It is not a settings key: Default sets it. Default: false.
	PrivateTmp bool `yaml:"-"`
}

// Credentials is the `credentials` section (DESIGN §8).
type Credentials struct {
	// EnvVars are environment variables to deny or mask. Default: none.
	EnvVars []EnvVar `yaml:"envVars"`
	// Files are files to deny or mask. Default: none.
	Files []CredFile `yaml:"files"`
	// AllowPlaintextInject allows swapping sentinels over plain HTTP.
	// Default: false.
	AllowPlaintextInject bool `yaml:"allowPlaintextInject"`
	// QuarantineOnLeak denies all further egress of the session once a
	// credential leak was blocked (moat). Default: false.
	QuarantineOnLeak bool `yaml:"quarantineOnLeak"`
	// AWSPairs group masked env vars into AWS key pairs for SigV4
	// re-signing; the standard AWS_* names pair themselves. Default: none.
	AWSPairs []AWSPair `yaml:"awsPairs"`
	// SigV4 says what to do with SigV4 forms that cannot be re-signed.
	// Default (nil): deny them all.
	SigV4 *SigV4 `yaml:"sigv4"`
}

// Credential modes.
const (
	ModeDeny = "deny" // the variable is removed, the file read-denied
	ModeMask = "mask" // the sandbox sees a sentinel, the gateway swaps it
)

// EnvVar is one `credentials.envVars` entry.
type EnvVar struct {
	// Name is the variable inside the sandbox. Required.
	Name string `yaml:"name"`
	// Mode is "deny" or "mask". Required.
	Mode string `yaml:"mode"`
	// Source is where the secret comes from (moat): "env:NAME", "file:PATH"
	// or "command:ARGV". Default: "env:" + Name (moat's own environment).
	Source string `yaml:"source"`
	// InjectHosts are the host patterns (no port) the secret is swapped in
	// for; each must be covered by network.allowedDomains.
	// Default (nil): network.allowedDomains. An explicit [] is an error.
	InjectHosts []string `yaml:"injectHosts"`
	// InjectBody also swaps the sentinel inside request bodies, up to a
	// cap (moat). Default: false (headers, userinfo and query only).
	InjectBody bool `yaml:"injectBody"`
	// Extract is a regex; group 1 of each match is the secret.
	// Default: the whole value.
	Extract string `yaml:"extract"`
	// OnExtractNoMatch is "warn", "deny" or "error". Default: "warn".
	OnExtractNoMatch string `yaml:"onExtractNoMatch"`
	// Decode is "jwt" or empty. Default: empty.
	Decode string `yaml:"decode"`
	// MaskClaims are JWT claims to mask; requires Decode. Default: none.
	MaskClaims []string `yaml:"maskClaims"`
}

// CredFile is one `credentials.files` entry.
type CredFile struct {
	// Path is the file (or, for deny, directory). Required.
	Path string `yaml:"path"`
	// Mode is "deny" or "mask". Required.
	Mode string `yaml:"mode"`
	// InjectHosts: as EnvVar.InjectHosts.
	InjectHosts []string `yaml:"injectHosts"`
	// InjectBody also swaps the sentinel inside request bodies, up to a
	// cap (moat). Default: false (headers, userinfo and query only).
	InjectBody bool `yaml:"injectBody"`
	// Extract: as EnvVar.Extract. Default: the whole file.
	Extract string `yaml:"extract"`
	// OnExtractNoMatch: as EnvVar.OnExtractNoMatch. Default: "warn".
	OnExtractNoMatch string `yaml:"onExtractNoMatch"`
	// Decode: as EnvVar.Decode.
	Decode string `yaml:"decode"`
	// MaskClaims: as EnvVar.MaskClaims.
	MaskClaims []string `yaml:"maskClaims"`
	// MaskDuplicates also masks verbatim copies of each secret outside the
	// extracted spans. Default: false.
	MaskDuplicates bool `yaml:"maskDuplicates"`
}

// AWSPair names the masked env vars of one AWS credential.
type AWSPair struct {
	AccessKeyIDVar     string `yaml:"accessKeyIdVar"`
	SecretAccessKeyVar string `yaml:"secretAccessKeyVar"`
	SessionTokenVar    string `yaml:"sessionTokenVar"` // default: none
}

// SigV4 holds "deny" or "passthrough" per request form. Each defaults to
// "deny".
type SigV4 struct {
	Streaming string `yaml:"streaming"`
	Presigned string `yaml:"presigned"`
	SigV4A    string `yaml:"sigv4a"`
}

// Audit is the `audit` section (moat).
type Audit struct {
	// Path is a JSON-lines file the audit log is appended to.
	// Default: none.
	Path string `yaml:"path"`
	// Stdout also writes the audit log to standard output. Default: false.
	Stdout bool `yaml:"stdout"`
}

// DNS is the `dns` section (moat).
type DNS struct {
	// Servers are "ip" or "ip:port" (IPv6 as "[ip]:port"); port 53 if
	// omitted. Default: the servers of /etc/resolv.conf.
	Servers []string `yaml:"servers"`
	// Timeout is a Go duration per query, in (0, 1m]. Default: "5s".
	Timeout string `yaml:"timeout"`
}

// GitConfig is srt's top-level `git` section.
type GitConfig struct {
	// SafeDirectories are passed as git's safe.directory. Default: none.
	SafeDirectories []string `yaml:"safeDirectories"`
}

// Ripgrep is srt's `ripgrep`; moat ignores it.
type Ripgrep struct {
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	Argv0   string   `yaml:"argv0"`
}

// Seccomp is srt's `seccomp`; moat ignores it.
type Seccomp struct {
	ApplyPath string `yaml:"applyPath"`
	Argv0     string `yaml:"argv0"`
}

// Windows is srt's `windows`; moat ignores it.
type Windows struct {
	SandboxUser     string  `yaml:"sandboxUser"`
	SublayerGUID    string  `yaml:"sublayerGuid"`
	WFPSublayerGUID string  `yaml:"wfpSublayerGuid"`
	ProxyPortRange  []int   `yaml:"proxyPortRange"`
	SrtWin          *SrtWin `yaml:"srtWin"`
}

// SrtWin is srt's `windows.srtWin`.
type SrtWin struct {
	Path string `yaml:"path"`
}

// DefaultSearchDepth is MandatoryDenySearchDepth's default.
const DefaultSearchDepth = 3

// SearchDepth is the effective MandatoryDenySearchDepth.
func (f *File) SearchDepth() int {
	if f.MandatoryDenySearchDepth == nil {
		return DefaultSearchDepth
	}
	return *f.MandatoryDenySearchDepth
}
