module github.com/moat-dev/moat

go 1.26.8

require (
	github.com/aws/aws-sdk-go-v2 v1.48.0
	github.com/elazarl/goproxy v1.9.4
	github.com/google/go-cmp v0.7.0
	github.com/miekg/dns v1.1.73
	github.com/seccomp/libseccomp-golang v0.11.1
	github.com/spf13/cobra v1.10.2
	github.com/things-go/go-socks5 v0.0.6
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/aws/smithy-go v1.28.9 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/text v0.43.0 // indirect
)
