// The etcd server binary, built from the same etcd modules that k8s.io/kubernetes requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
