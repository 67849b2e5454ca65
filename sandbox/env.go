package sandbox

import (
	"strconv"
	"strings"
)

// Ports the relay inside the Linux sandbox listens on (DESIGN §4).
const (
	DefaultHTTPPort  = 3128
	DefaultSOCKSPort = 1080
)

// EnvOptions are the inputs of ProxyEnv.
type EnvOptions struct {
	// Self is the absolute path of the moat binary, used for the ssh
	// ProxyCommand (there is no socat inside the sandbox).
	Self string
	// TmpDir is the private, writable TMPDIR.
	TmpDir string
	// TrustBundle, when set, is exported in every CA variable.
	TrustBundle string
	// HTTPPort and SOCKSPort default to 3128 and 1080.
	HTTPPort, SOCKSPort int
}

// caVars are the variables that point clients at the trust bundle when TLS is
// terminated (DESIGN §4).
var caVars = []string{
	"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE",
	"PIP_CERT", "GIT_SSL_CAINFO", "AWS_CA_BUNDLE", "CARGO_HTTP_CAINFO", "DENO_CERT",
	"CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "NIX_SSL_CERT_FILE",
}

// ProxyEnv returns base with the sandbox's variables added or overridden:
// the proxy variables (no credentials: the per-session socket is the
// credential), SANDBOX_RUNTIME, MOAT_SANDBOX, TMPDIR, JAVA_TOOL_OPTIONS and,
// with a trust bundle, every CA variable. Inherited MOAT_* variables that
// look like secrets are removed so a gateway token never reaches the command.
// The result is sorted by first appearance: base order, then the added names.
// It is pure.
func ProxyEnv(base []string, o EnvOptions) []string {
	if o.HTTPPort == 0 {
		o.HTTPPort = DefaultHTTPPort
	}
	if o.SOCKSPort == 0 {
		o.SOCKSPort = DefaultSOCKSPort
	}
	hp := strconv.Itoa(o.HTTPPort)
	sp := strconv.Itoa(o.SOCKSPort)
	httpURL := "http://localhost:" + hp
	socksURL := "socks5h://localhost:" + sp
	const noProxy = "localhost,127.0.0.1,::1"

	type kv struct{ k, v string }
	set := []kv{
		{"HTTP_PROXY", httpURL}, {"http_proxy", httpURL},
		{"HTTPS_PROXY", httpURL}, {"https_proxy", httpURL},
		{"ALL_PROXY", httpURL}, {"all_proxy", httpURL},
		{"GRPC_PROXY", httpURL}, {"grpc_proxy", httpURL},
		{"FTP_PROXY", socksURL}, {"ftp_proxy", socksURL},
		{"RSYNC_PROXY", "localhost:" + sp},
		{"DOCKER_HTTP_PROXY", httpURL}, {"DOCKER_HTTPS_PROXY", httpURL},
		{"CLOUDSDK_PROXY_TYPE", "http"}, {"CLOUDSDK_PROXY_ADDRESS", "localhost"}, {"CLOUDSDK_PROXY_PORT", hp},
		{"NO_PROXY", noProxy}, {"no_proxy", noProxy},
		{"SANDBOX_RUNTIME", "1"}, {"MOAT_SANDBOX", "1"},
		{"JAVA_TOOL_OPTIONS", "-Dhttp.proxyHost=localhost -Dhttp.proxyPort=" + hp +
			" -Dhttps.proxyHost=localhost -Dhttps.proxyPort=" + hp +
			" -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]"},
	}
	if o.Self != "" {
		set = append(set, kv{"GIT_SSH_COMMAND", "ssh -o ProxyCommand='" + o.Self + " proxy-connect %h %p'"})
	}
	if o.TmpDir != "" {
		set = append(set, kv{"TMPDIR", o.TmpDir})
	}
	if o.TrustBundle != "" {
		for _, name := range caVars {
			set = append(set, kv{name, o.TrustBundle})
		}
	}

	override := make(map[string]string, len(set))
	for _, e := range set {
		override[e.k] = e.v
	}
	out := make([]string, 0, len(base)+len(set))
	done := make(map[string]bool, len(set))
	for _, e := range base {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			continue
		}
		if strings.HasPrefix(k, "MOAT_") && LooksSecret(k) {
			continue
		}
		if v, ok := override[k]; ok {
			if !done[k] {
				out = append(out, k+"="+v)
				done[k] = true
			}
			continue
		}
		out = append(out, e)
	}
	for _, e := range set {
		if !done[e.k] {
			out = append(out, e.k+"="+e.v)
			done[e.k] = true
		}
	}
	return out
}

// LooksSecret reports whether an environment variable name suggests a secret
// value (TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, AUTH). Plan redacts such
// values and ProxyEnv drops such MOAT_* variables.
func LooksSecret(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// redactEnv replaces the values of secret-looking variables with "<redacted>".
func redactEnv(env []string) []string {
	out := make([]string, len(env))
	for i, e := range env {
		k, _, _ := strings.Cut(e, "=")
		if LooksSecret(k) {
			e = k + "=<redacted>"
		}
		out[i] = e
	}
	return out
}
