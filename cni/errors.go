package cni

import (
	"errors"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// CNI error codes the plugin returns (spec "Error" section).
const (
	CodeIncompatibleVersion = types.ErrIncompatibleCNIVersion // 1
	CodeUnknownContainer    = types.ErrUnknownContainer
	CodeBadEnv              = types.ErrInvalidEnvironmentVariables
	CodeIO                  = types.ErrIOFailure
	CodeDecode              = types.ErrDecodingFailure
	CodeInvalidConfig       = types.ErrInvalidNetworkConfig
	CodeTryAgainLater       = types.ErrTryAgainLater
	CodeNotAvailable        = types.ErrPluginNotAvailable
	CodeInternal            = types.ErrInternal
)

// Error is a failure that carries the CNI error code the runtime sees. It
// wraps its cause, so errors.Is/As work through it.
type Error struct {
	Code uint
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// withCode wraps err with a CNI code unless it already carries one.
func withCode(code uint, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: code, Err: err}
}

func errorf(code uint, format string, a ...any) error {
	return &Error{Code: code, Err: fmt.Errorf(format, a...)}
}

// Code returns the CNI code of err: that of the outermost *Error in its
// chain, or 999 (internal error) when nothing assigned one.
func Code(err error) uint {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return CodeInternal
}

// AsTypesError converts err to the error object printed on stdout. The
// message is the whole chain, so the runtime's log says what failed where.
func AsTypesError(err error) *types.Error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) && !errors.As(err, new(*Error)) {
		return te
	}
	return types.NewError(Code(err), err.Error(), "")
}
