package client

// PartsSize is the total size of parts.
func PartsSize(parts []Part) uint64 { return partsSize(parts) }

// CopyToParts copies data over parts in order (parts must hold it).
func CopyToParts(parts []Part, data []byte) { copyOut(parts, 0, data) }

// CopyFromParts fills dst from parts in order.
func CopyFromParts(dst []byte, parts []Part) { copyIn(dst, parts, 0) }
