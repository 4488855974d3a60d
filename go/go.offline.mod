// The OFFLINE build of the Go client (scripts/clients-ci.sh: GOFLAGS=-modfile=go.offline.mod),
// against Debian's Go packages (bookworm): every dependency is replaced by its copy in
// /usr/share/gocode/src, so no proxy and no go.sum are needed. go.mod is the module file users
// get; its requirements must stay the same as these (clients-ci checks it). The versions
// listed must be at least what the replacements' own go.mod files ask for (genproto: grpc
// 1.33.3 asks for 20200526), otherwise the go command loads the full module graph, which is
// not on disk. Never run `go mod tidy` with this file.
module github.com/autoscaled/autoscaled/go

go 1.19

require (
	github.com/golang/protobuf v1.5.2
	golang.org/x/net v0.7.0
	golang.org/x/sys v0.5.0
	golang.org/x/text v0.7.0
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

replace (
	github.com/golang/protobuf => /usr/share/gocode/src/github.com/golang/protobuf
	golang.org/x/net => /usr/share/gocode/src/golang.org/x/net
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
	golang.org/x/text => /usr/share/gocode/src/golang.org/x/text
	google.golang.org/genproto => /usr/share/gocode/src/google.golang.org/genproto
	google.golang.org/grpc => /usr/share/gocode/src/google.golang.org/grpc
	google.golang.org/protobuf => /usr/share/gocode/src/google.golang.org/protobuf
)
