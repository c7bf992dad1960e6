package kvstore

import (
	"errors"
	"fmt"
)

// ErrorCode is an upstream Mooncake Store error number
// (mooncake-store/include/types.h). Python receives these values as is.
type ErrorCode int32

// Error numbers used by this implementation, as upstream numbers them.
const (
	OK                         ErrorCode = 0
	InternalError              ErrorCode = -1
	BufferOverflow             ErrorCode = -10
	SegmentNotFound            ErrorCode = -101
	SegmentAlreadyExists       ErrorCode = -102
	ClientNotFound             ErrorCode = -103
	NoAvailableHandle          ErrorCode = -200
	InvalidKey                 ErrorCode = -400
	WriteFail                  ErrorCode = -500
	InvalidParams              ErrorCode = -600
	IllegalClient              ErrorCode = -601
	InvalidWrite               ErrorCode = -700
	InvalidRead                ErrorCode = -701
	InvalidReplica             ErrorCode = -702
	ReplicaIsNotReady          ErrorCode = -703
	ObjectNotFound             ErrorCode = -704
	ObjectAlreadyExists        ErrorCode = -705
	ObjectHasLease             ErrorCode = -706
	LeaseExpired               ErrorCode = -707
	ObjectHasReplicationTask   ErrorCode = -708
	ReplicaNotFound            ErrorCode = -710
	ObjectReplicaBusy          ErrorCode = -714
	TransferFail               ErrorCode = -800
	ChecksumMismatch           ErrorCode = -801
	RPCFail                    ErrorCode = -900
	RPCTimeout                 ErrorCode = -901
	EtcdOperationError         ErrorCode = -1000
	UnavailableInCurrentStatus ErrorCode = -1010
	NotSupported               ErrorCode = -1012
	FileNotFound               ErrorCode = -1100
	UnableOffload              ErrorCode = -1300
	TaskNotFound               ErrorCode = -1400
	TaskPendingLimitExceeded   ErrorCode = -1401
	TenantQuotaExceeded        ErrorCode = -1700
	TenantNotRegistered        ErrorCode = -1701
	TenantNotEmpty             ErrorCode = -1702
)

var names = map[ErrorCode]string{
	OK: "OK", InternalError: "INTERNAL_ERROR", BufferOverflow: "BUFFER_OVERFLOW",
	SegmentNotFound: "SEGMENT_NOT_FOUND", SegmentAlreadyExists: "SEGMENT_ALREADY_EXISTS",
	ClientNotFound: "CLIENT_NOT_FOUND", NoAvailableHandle: "NO_AVAILABLE_HANDLE",
	InvalidKey: "INVALID_KEY", WriteFail: "WRITE_FAIL", InvalidParams: "INVALID_PARAMS",
	IllegalClient: "ILLEGAL_CLIENT", InvalidWrite: "INVALID_WRITE", InvalidRead: "INVALID_READ",
	InvalidReplica: "INVALID_REPLICA", ReplicaIsNotReady: "REPLICA_IS_NOT_READY",
	ObjectNotFound: "OBJECT_NOT_FOUND", ObjectAlreadyExists: "OBJECT_ALREADY_EXISTS",
	ObjectHasLease: "OBJECT_HAS_LEASE", LeaseExpired: "LEASE_EXPIRED",
	ObjectHasReplicationTask: "OBJECT_HAS_REPLICATION_TASK", ReplicaNotFound: "REPLICA_NOT_FOUND",
	ObjectReplicaBusy: "OBJECT_REPLICA_BUSY", TransferFail: "TRANSFER_FAIL",
	ChecksumMismatch: "CHECKSUM_MISMATCH", RPCFail: "RPC_FAIL", RPCTimeout: "RPC_TIMEOUT",
	EtcdOperationError: "ETCD_OPERATION_ERROR", UnavailableInCurrentStatus: "UNAVAILABLE_IN_CURRENT_STATUS",
	NotSupported: "NOT_SUPPORTED", FileNotFound: "FILE_NOT_FOUND", TaskNotFound: "TASK_NOT_FOUND",
	TaskPendingLimitExceeded: "TASK_PENDING_LIMIT_EXCEEDED", TenantQuotaExceeded: "TENANT_QUOTA_EXCEEDED",
	TenantNotRegistered: "TENANT_NOT_REGISTERED", TenantNotEmpty: "TENANT_NOT_EMPTY",
	UnableOffload: "UNABLE_OFFLOAD",
}

func (c ErrorCode) String() string {
	if s, ok := names[c]; ok {
		return s
	}
	return fmt.Sprintf("ERROR_%d", int32(c))
}

// Error makes an ErrorCode usable as an error; OK is never returned as one.
func (c ErrorCode) Error() string { return fmt.Sprintf("%s (%d)", c.String(), int32(c)) }

// Err returns nil for OK and the code as an error otherwise.
func (c ErrorCode) Err() error {
	if c == OK {
		return nil
	}
	return c
}

// CodeOf extracts the ErrorCode from err: OK for nil, the code when err
// wraps one, InternalError otherwise.
func CodeOf(err error) ErrorCode {
	if err == nil {
		return OK
	}
	var c ErrorCode
	if errors.As(err, &c) {
		return c
	}
	return InternalError
}
