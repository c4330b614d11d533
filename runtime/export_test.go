package runtime

// ApplyFunctionFiles lets tests apply function files of their own making.
var ApplyFunctionFiles = applyFunctionFiles

// HasNULEscape lets the fuzz test compare the payload check with a decoder.
var HasNULEscape = hasNULEscape
