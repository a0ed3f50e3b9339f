package dlm

import (
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// Limits on what the client accepts. A value outside them is rejected with
// ErrInvalid before any store is asked. A resource name must also be valid
// UTF-8 without control characters (Unicode Cc: U+0000-U+001F,
// U+007F-U+009F) or bidirectional formatting characters (U+061C, U+200E,
// U+200F, U+202A-U+202E, U+2066-U+2069), which the dlm server refuses too.
const (
	// MaxResourceBytes is the longest resource name, in bytes.
	MaxResourceBytes = 512
	// MaxMetadataBytes is the longest owner description, in bytes.
	MaxMetadataBytes = 1024
	// MinTTL is the shortest time to live of a lock.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest time to live of a lock. Longer holds renew.
	MaxTTL = 24 * time.Hour
	// MaxCapacity is the largest number of permits of a semaphore.
	MaxCapacity = 1 << 20
	// MinPollInterval is the shortest interval of WithPollInterval.
	MinPollInterval = 10 * time.Millisecond
)

// validate checks the resource name and the settings of one call.
func (c *config) validate(resource string) error {
	nameErr := driver.CheckName(resource)
	switch {
	case resource == "":
		return fmt.Errorf("%w: resource name is empty", ErrInvalid)
	case len(resource) > MaxResourceBytes:
		return fmt.Errorf("%w: resource name is %d bytes, the limit is %d", ErrInvalid, len(resource), MaxResourceBytes)
	case nameErr != nil:
		return fmt.Errorf("%w: resource name %q: %w", ErrInvalid, resource, nameErr)
	case c.ttl < MinTTL || c.ttl > MaxTTL:
		return fmt.Errorf("%w: TTL %s is outside [%s, %s]", ErrInvalid, c.ttl, MinTTL, MaxTTL)
	case c.wait < 0 && c.wait != waitForever:
		return fmt.Errorf("%w: wait %s is negative", ErrInvalid, c.wait)
	case c.maxHold < 0:
		return fmt.Errorf("%w: maximum hold %s is negative", ErrInvalid, c.maxHold)
	case c.maxHold > 0 && c.maxHold < c.ttl:
		return fmt.Errorf("%w: maximum hold %s is shorter than the TTL %s", ErrInvalid, c.maxHold, c.ttl)
	case !c.mode.Valid():
		return fmt.Errorf("%w: unknown lock mode %d", ErrInvalid, uint8(c.mode))
	case len(c.metadata) > MaxMetadataBytes:
		return fmt.Errorf("%w: metadata is %d bytes, the limit is %d", ErrInvalid, len(c.metadata), MaxMetadataBytes)
	case c.capacity != 0 && (c.capacity < 1 || c.capacity > MaxCapacity):
		return fmt.Errorf("%w: semaphore capacity %d is outside [1, %d]", ErrInvalid, c.capacity, MaxCapacity)
	case c.capacity != 0 && (c.permits < 1 || c.permits > c.capacity):
		return fmt.Errorf("%w: %d permits of a semaphore of %d", ErrInvalid, c.permits, c.capacity)
	case c.poll < MinPollInterval || c.poll > MaxTTL:
		return fmt.Errorf("%w: poll interval %s is outside [%s, %s]", ErrInvalid, c.poll, MinPollInterval, MaxTTL)
	case c.retry == nil:
		return fmt.Errorf("%w: retry strategy is nil", ErrInvalid)
	}
	return nil
}
