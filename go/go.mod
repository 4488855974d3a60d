// Go client for autoscaled: the generated code (autoscaledv1) and a wrapper for controllers
// (autoscaled). An ordinary module: `go get github.com/autoscaled/autoscaled/go@latest` from a
// controller's module; the versions are the lowest it is tested with (the go command picks
// the highest any module of the build requires). The offline CI build uses go.offline.mod
// (same requirements, replaced by Debian's copies); keep the require blocks identical.
module github.com/autoscaled/autoscaled/go

go 1.19

require (
	github.com/golang/protobuf v1.5.2
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
)

require (
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.5.0 // indirect
	golang.org/x/text v0.7.0 // indirect
)
