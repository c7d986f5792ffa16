// Package loopback finds free loopback ports for tests that start real
// servers and daemons on them.
package loopback

import (
	"fmt"
	"net"
	"syscall"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address nothing listened on a moment ago.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is FreeAddr's port.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RefusedAddr returns a 127.0.0.1 address that refuses connections for the
// test's life: its port is bound by a socket that never listens, so a
// connect is refused and no other socket, of this test or one running
// beside it, can take the port. FreeAddr's port may be taken by then: a
// daemon of a parallel test once listened on it, and a client meant to
// find nothing found it.
func RefusedAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatal(err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("bound to %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in.Port)
}
