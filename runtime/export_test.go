package runtime

// ApplyFunctionFiles lets tests apply function files of their own making.
var ApplyFunctionFiles = applyFunctionFiles
