/* UTF-8 (RFC 3629): the one validator and decoder of the library.  Strict:
 * no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
 * Internal to libposttrain. */
#ifndef PT_CORE_UTF8_H
#define PT_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode the code point at s[0..n): its length in bytes (1 to 4) with *cp set,
 * or 0 when the bytes there are not a complete, well-formed sequence. */
size_t pt__utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* The length of the longest well-formed UTF-8 prefix of s[0..n): n when it
 * is all well-formed, else the offset of the first byte that starts no
 * complete, well-formed sequence.  (A NUL byte is a valid code point here.) */
size_t pt__utf8_valid_prefix(const char *s, size_t n);
/* Is s[0..n) well-formed UTF-8?  (pt__utf8_valid_prefix(s, n) == n) */
bool pt__utf8_valid(const char *s, size_t n);
/* Encode cp (at most U+10FFFF, not a surrogate) into out: the byte count
 * (1 to 4), or 0 for a value that is not a Unicode scalar value. */
size_t pt__utf8_encode(uint32_t cp, char out[4]);

#endif
