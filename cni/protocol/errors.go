package protocol

import (
	"errors"
	"fmt"
)

// CNI error codes the plugin returns (spec "Error" section).
const (
	CodeIncompatibleVersion uint = 1
	CodeUnknownContainer    uint = 3
	CodeBadEnv              uint = 4
	CodeIO                  uint = 5
	CodeDecode              uint = 6
	CodeInvalidConfig       uint = 7
	CodeInvalidNetNS        uint = 8
	CodeTryAgainLater       uint = 11
	CodeNotAvailable        uint = 50
	CodeInternal            uint = 999
)

// Error is a failure that carries the CNI error code the runtime sees. It
// wraps its cause, so errors.Is/As work through it.
type Error struct {
	Code uint
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// WithCode wraps err with a CNI code unless it already carries one.
func WithCode(code uint, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: code, Err: err}
}

// Errorf is fmt.Errorf with a CNI code.
func Errorf(code uint, format string, a ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, a...)}
}

// WireError is the error object printed on stdout (and read from a
// delegate plugin's stdout).
type WireError struct {
	Code    uint   `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details,omitempty"`
}

func (e *WireError) Error() string {
	if e.Details != "" {
		return e.Msg + "; " + e.Details
	}
	return e.Msg
}

// appendJSON writes the error object (by hand, like Result).
func (e *WireError) appendJSON(b []byte) []byte {
	b = append(b, `{"code":`...)
	b = fmt.Appendf(b, "%d", e.Code)
	b = append(b, `,"msg":`...)
	b = appendString(b, e.Msg)
	b = appendStringField(b, "details", e.Details)
	return append(b, '}')
}

// Code returns the CNI code of err: that of the outermost *Error in its
// chain, else that of a delegate's error object, else 999 (internal
// error).
func Code(err error) uint {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var we *WireError
	if errors.As(err, &we) {
		return we.Code
	}
	return CodeInternal
}

// AsWireError converts err to the error object printed on stdout. The
// message is the whole chain, so the runtime's log says what failed where;
// a delegate's error object passes through as it was.
func AsWireError(err error) *WireError {
	if err == nil {
		return nil
	}
	var we *WireError
	if errors.As(err, &we) && !errors.As(err, new(*Error)) {
		return we
	}
	return &WireError{Code: Code(err), Msg: err.Error()}
}
