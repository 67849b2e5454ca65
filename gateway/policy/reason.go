package policy

// Reason says why a decision or address verdict came out as it did. Text is
// derived from it and never parsed back.
type Reason uint8

// The reasons. Host decisions come first, then the address classes of
// CheckAddr.
const (
	ReasonNone          Reason = iota // no reason (the zero value)
	ReasonMalformedHost               // the host failed validation
	ReasonBadPort                     // port 0
	ReasonDenyList                    // a deniedDomains entry matched
	ReasonAllowList                   // an allowedDomains entry matched
	ReasonStrict                      // strictAllowlist and nothing matched
	ReasonNotAllowed                  // nothing matched and no ask hook allowed it
	ReasonAsk                         // the ask hook allowed it

	// Address classes (CheckAddr).
	ReasonPublic         // a public address
	ReasonAllowedRange   // allowedResolvedAddresses
	ReasonLiteral        // an explicitly allowed IP literal
	ReasonUnspecified    // 0.0.0.0 or ::
	ReasonLoopback       // 127.0.0.0/8, ::1
	ReasonLinkLocal      // 169.254.0.0/16, fe80::/10
	ReasonMetadata       // cloud metadata endpoints
	ReasonMulticast      // 224.0.0.0/4, ff00::/8
	ReasonReserved       // 240.0.0.0/4 and deprecated forms
	ReasonBroadcast      // 255.255.255.255
	ReasonPrivate        // RFC 1918
	ReasonCGNAT          // 100.64.0.0/10
	ReasonULA            // fc00::/7
	ReasonThisNetwork    // 0.0.0.0/8
	ReasonEmbeddedV4     // NAT64, 6to4 or Teredo embedding a denied IPv4
	ReasonLocalInterface // an address of this host (or the gateway)
	ReasonDeniedRange    // deniedResolvedAddresses
	ReasonNotLoopback    // a localhost entry resolved to a non-loopback address
	ReasonNoAddress      // the name resolved to no address
)

var reasonCodes = [...]string{
	ReasonNone:           "none",
	ReasonMalformedHost:  "malformed-host",
	ReasonBadPort:        "bad-port",
	ReasonDenyList:       "deny-list",
	ReasonAllowList:      "allow-list",
	ReasonStrict:         "strict-allowlist",
	ReasonNotAllowed:     "not-allowed",
	ReasonAsk:            "ask",
	ReasonPublic:         "public",
	ReasonAllowedRange:   "allowed-range",
	ReasonLiteral:        "allowed-literal",
	ReasonUnspecified:    "unspecified",
	ReasonLoopback:       "loopback",
	ReasonLinkLocal:      "link-local",
	ReasonMetadata:       "metadata",
	ReasonMulticast:      "multicast",
	ReasonReserved:       "reserved",
	ReasonBroadcast:      "broadcast",
	ReasonPrivate:        "private",
	ReasonCGNAT:          "cgnat",
	ReasonULA:            "ula",
	ReasonThisNetwork:    "this-network",
	ReasonEmbeddedV4:     "embedded-v4",
	ReasonLocalInterface: "local-interface",
	ReasonDeniedRange:    "denied-range",
	ReasonNotLoopback:    "not-loopback",
	ReasonNoAddress:      "no-address",
}

var reasonTexts = [...]string{
	ReasonNone:           "no reason",
	ReasonMalformedHost:  "malformed host",
	ReasonBadPort:        "port must be 1-65535",
	ReasonDenyList:       "host is on the deny list",
	ReasonAllowList:      "host is on the allow list",
	ReasonStrict:         "host is not on the allow list (strict)",
	ReasonNotAllowed:     "host is not on the allow list",
	ReasonAsk:            "allowed by the ask hook",
	ReasonPublic:         "public address",
	ReasonAllowedRange:   "address is in network.allowedResolvedAddresses",
	ReasonLiteral:        "explicitly allowed IP literal",
	ReasonUnspecified:    "unspecified address",
	ReasonLoopback:       "loopback address",
	ReasonLinkLocal:      "link-local address",
	ReasonMetadata:       "cloud metadata address",
	ReasonMulticast:      "multicast address",
	ReasonReserved:       "reserved address",
	ReasonBroadcast:      "broadcast address",
	ReasonPrivate:        "private address (RFC 1918)",
	ReasonCGNAT:          "carrier-grade NAT address (RFC 6598)",
	ReasonULA:            "unique local IPv6 address (RFC 4193)",
	ReasonThisNetwork:    "\"this network\" address (0.0.0.0/8)",
	ReasonEmbeddedV4:     "IPv6 address embedding a denied IPv4 address",
	ReasonLocalInterface: "address of this host's own interfaces",
	ReasonDeniedRange:    "address is in network.deniedResolvedAddresses",
	ReasonNotLoopback:    "localhost entry resolved to a non-loopback address",
	ReasonNoAddress:      "name resolved to no address",
}

// Code is the stable machine-readable code (X-Moat-Reason, audit "reason").
func (r Reason) Code() string {
	if int(r) < len(reasonCodes) {
		return reasonCodes[r]
	}
	return "unknown"
}

// String is the human text.
func (r Reason) String() string {
	if int(r) < len(reasonTexts) {
		return reasonTexts[r]
	}
	return "unknown reason"
}

// ReasonByCode looks a reason up by its Code, for readers of audit lines
// that want the human text back (moat run --report). Unknown codes report
// false.
func ReasonByCode(code string) (Reason, bool) {
	for r, c := range reasonCodes {
		if c == code {
			return Reason(r), true
		}
	}
	return ReasonNone, false
}
