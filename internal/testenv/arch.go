package testenv

import "runtime"

const runtimeArch = runtime.GOARCH
