//! Unit tests of the `lstruct` library against Redis's results.

use super::super::clib::testing::check;

// Expected texts captured from redis-server 7.0.15 (EVAL of
// `PRELUDE .. "return show(pcall(function() return EXPR end))"`).
#[test]
fn matches_redis() {
    check(&[
        // pack: integers of each size and order, signed and unsigned conversions
        (
            r#"hx(struct.pack('b', 1)), hx(struct.pack('B', 255)), hx(struct.pack('h', -2)), hx(struct.pack('>H', 0x1234)), hx(struct.pack('<H', 0x1234)), hx(struct.pack('i', -1)), hx(struct.pack('>I', 1)), hx(struct.pack('l', 1)), hx(struct.pack('>L', 1)), hx(struct.pack('T', 3))"#,
            r#"true "01" "ff" "feff" "1234" "3412" "ffffffff" "00000001" "0100000000000000" "0000000000000001" "0300000000000000""#,
        ),
        (
            r#"hx(struct.pack('b', 300)), hx(struct.pack('B', -1)), hx(struct.pack('h', 1.9)), hx(struct.pack('h', -1.9)), hx(struct.pack('>i3', 0x123456)), hx(struct.pack('<i3', -2)), hx(struct.pack('i0', 5)), hx(struct.pack('>i12', -1)), hx(struct.pack('<I12', 2^40)), hx(struct.pack('i17', 1))"#,
            r#"true "2c" "ff" "0100" "ffff" "123456" "feffff" "" "00000000ffffffffffffffff" "000000000001000000000000" "0100000000000000000000000000000000""#,
        ),
        (
            r#"hx(struct.pack('>L', 2^64)), hx(struct.pack('>L', 0/0)), hx(struct.pack('>L', -(0/0))), hx(struct.pack('>l', -2^70)), hx(struct.pack('>L', -1)), hx(struct.pack('>L', 2^63 + 2^12)), hx(struct.pack('>l', 2^63)), hx(struct.pack('>l', 1/0)), hx(struct.pack('>l', -1/0)), hx(struct.pack('>L', 2^53 + 1))"#,
            r#"true "0000000000000000" "8000000000000000" "8000000000000000" "8000000000000000" "ffffffffffffffff" "8000000000001000" "8000000000000000" "0000000000000000" "8000000000000000" "0020000000000000""#,
        ),
        (
            r#"hx(struct.pack('>i32', -2)), hx(struct.pack('<I32', 1))"#,
            r#"true "000000000000000000000000000000000000000000000000fffffffffffffffe" "0100000000000000000000000000000000000000000000000000000000000000""#,
        ),
        (
            r#"hx(struct.pack('i', '12')), hx(struct.pack('i', ' 0x10 '))"#,
            r#"true "0c000000" "10000000""#,
        ),
        // floats and doubles
        (
            r#"hx(struct.pack('f', 1.5)), hx(struct.pack('>f', 0.1)), hx(struct.pack('<d', 0.1)), hx(struct.pack('>d', -0.0)), hx(struct.pack('>f', 1e300)), hx(struct.pack('>d', 1/0)), hx(struct.pack('>f', -1e-50)), hx(struct.pack('>d', 2^-1074))"#,
            r#"true "0000c03f" "3dcccccd" "9a9999999999b93f" "8000000000000000" "7f800000" "fff0000000000000" "80000000" "0000000000000001""#,
        ),
        // strings: c with a size, c0, s, x
        (
            r#"hx(struct.pack('c3', 'abcdef')), hx(struct.pack('c0', 'abcdef')), hx(struct.pack('c', 'xy')), hx(struct.pack('s', 'ab')), hx(struct.pack('s', 'a\0b')), hx(struct.pack('c0', '')), hx(struct.pack('xxbx', 7)), hx(struct.pack('c2', 12.5)), hx(struct.pack('s', 1e15))"#,
            r#"true "616263" "616263646566" "78" "616200" "61006200" "" "00000700" "3132" "31652b313500""#,
        ),
        // alignment: ! sets the maximum, items align to min(size, max)
        (
            r#"hx(struct.pack('!4 b i', 1, 2)), hx(struct.pack('!b i', 1, 2)), hx(struct.pack('! b d', 1, 2)), hx(struct.pack('!2 b i b h', 1, 2, 3, 4)), hx(struct.pack('!8 b i3', 1, 2)), hx(struct.pack('!8 b i5', 1, 2)), hx(struct.pack('!8 b c3 i', 1, 'abc', 2)), hx(struct.pack('!1073741824 b i', 1, 2)), hx(struct.pack('!16 b i16', 1, 2))"#,
            r#"true "0100000002000000" "0100000002000000" "01000000000000000000000000000040" "01000200000003000400" "010000020000" "01000000000200000000" "0161626302000000" "0100000002000000" "0100000000000000000000000000000002000000000000000000000000000000""#,
        ),
        (
            r#"hx(struct.pack('>!4 b <i >h', 1, 2, 3))"#,
            r#"true "01000000020000000003""#,
        ),
        (
            r#"hx(struct.pack('')), hx(struct.pack('  ')), hx(struct.pack('b\0b', 1, 2))"#,
            r#"true "" "" "01""#,
        ),
        // pack errors
        (
            r#"struct.pack('Y', 1)"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (invalid format option 'Y')""#,
        ),
        (
            r#"struct.pack('b z', 1)"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (invalid format option 'z')""#,
        ),
        (
            r#"struct.pack('\200')"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (invalid format option '\200')""#,
        ),
        (
            r#"struct.pack('5')"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (invalid format option '5')""#,
        ),
        (
            r#"struct.pack('!3i', 1)"#,
            r#"false "user_script:1: alignment 3 is not a power of 2""#,
        ),
        (
            r#"struct.pack('!0i', 1)"#,
            r#"false "user_script:1: alignment 0 is not a power of 2""#,
        ),
        (
            r#"struct.pack('!2147483648i', 1)"#,
            r#"false "user_script:1: integral size overflow""#,
        ),
        (
            r#"struct.pack('i99999999999', 1)"#,
            r#"false "user_script:1: integral size overflow""#,
        ),
        (
            r#"struct.pack('c2147483647', 'x')"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (string too short)""#,
        ),
        (
            r#"struct.pack('c2147483648', 'x')"#,
            r#"false "user_script:1: integral size overflow""#,
        ),
        (
            r#"struct.pack('i33', 1)"#,
            r#"false "user_script:1: integral size 33 is larger than limit of 32""#,
        ),
        (
            r#"struct.pack('I2147483647', 1)"#,
            r#"false "user_script:1: integral size 2147483647 is larger than limit of 32""#,
        ),
        (r#"struct.pack('i', 1, 2)"#, r#"true "\001\000\000\000""#),
        (
            r#"struct.pack('ii', 1)"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (number expected, got nil)""#,
        ),
        (
            r#"struct.pack('iii', 1)"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (number expected, got nil)""#,
        ),
        (
            r#"struct.pack('i', 'x')"#,
            r#"false "user_script:1: bad argument #2 to 'pack' (number expected, got string)""#,
        ),
        (
            r#"struct.pack('i', {})"#,
            r#"false "user_script:1: bad argument #2 to 'pack' (number expected, got table)""#,
        ),
        (
            r#"struct.pack('d', true)"#,
            r#"false "user_script:1: bad argument #2 to 'pack' (number expected, got boolean)""#,
        ),
        (
            r#"struct.pack('c5', 'ab')"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (string too short)""#,
        ),
        (
            r#"struct.pack('c2000000000', 'ab')"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (string too short)""#,
        ),
        (
            r#"struct.pack('s', {})"#,
            r#"false "user_script:1: bad argument #2 to 'pack' (string expected, got table)""#,
        ),
        (
            r#"struct.pack('c', nil)"#,
            r#"false "user_script:1: bad argument #2 to 'pack' (string expected, got nil)""#,
        ),
        (
            r#"struct.pack()"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (string expected, got no value)""#,
        ),
        (
            r#"struct.pack({})"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (string expected, got table)""#,
        ),
        (
            r#"struct.pack(12, 1)"#,
            r#"false "user_script:1: bad argument #1 to 'pack' (invalid format option '1')""#,
        ),
        (
            r#"struct.pack('bbb', 1, 2)"#,
            r#"false "user_script:1: bad argument #4 to 'pack' (number expected, got nil)""#,
        ),
        // unpack: integers (sign from the top bit; past 8 bytes as x86 shifts)
        (
            r#"struct.unpack('b', '\255'), struct.unpack('B', '\255'), struct.unpack('>h', '\255\254'), struct.unpack('<H', '\255\254'), struct.unpack('>i', '\128\0\0\0'), struct.unpack('>I', '\128\0\0\0'), struct.unpack('<l', '\1\0\0\0\0\0\0\128'), struct.unpack('<L', '\255\255\255\255\255\255\255\255'), struct.unpack('T', '\7\0\0\0\0\0\0\0')"#,
            r#"true -1 255 -2 65279 -2147483648 2147483648 -9.2233720368547758e+18 1.8446744073709552e+19 7 9"#,
        ),
        (
            r#"struct.unpack('i0', 'abc'), struct.unpack('I0', 'abc'), struct.unpack('>i3', '\255\255\254'), struct.unpack('<i3', '\1\2\3')"#,
            r#"true 0 0 -2 197121 4"#,
        ),
        (
            r#"struct.unpack('>i9', string.rep('\255', 9)), struct.unpack('<i9', '\128' .. string.rep('\0', 8)), struct.unpack('<i9', string.rep('\0', 8) .. '\128'), struct.unpack('>I9', '\1' .. string.rep('\0', 8)), struct.unpack('>i16', string.rep('\0', 15) .. '\1'), struct.unpack('>i12', string.rep('\0', 4) .. '\128' .. string.rep('\0', 7))"#,
            r#"true -1 -128 0 0 1 -2147483648 13"#,
        ),
        (
            r#"struct.unpack('>L', '\128\0\0\0\0\0\0\1'), struct.unpack('>l', '\128\0\0\0\0\0\0\0'), struct.unpack('>L', '\0\32\0\0\0\0\0\1')"#,
            r#"true 9.2233720368547758e+18 -9.2233720368547758e+18 9007199254740992 9"#,
        ),
        // unpack: floats, strings, positions
        (
            r#"struct.unpack('>f', '\63\192\0\0'), struct.unpack('<d', struct.pack('<d', 0.1)), struct.unpack('>d', '\127\240\0\0\0\0\0\0'), struct.unpack('>f', '\255\192\0\0')"#,
            r#"true 1.5 0.10000000000000001 inf -nan 5"#,
        ),
        (
            r#"struct.unpack('c3', 'abcdef'), struct.unpack('c3c2', 'abcdef'), struct.unpack('s', 'ab\0cd'), struct.unpack('ss', 'ab\0\0'), struct.unpack('xbx', '\1\2\3')"#,
            r#"true "abc" "abc" "ab" "ab" 2 4"#,
        ),
        (
            r#"struct.unpack('bc0', '\3abcdef'), struct.unpack('c2c0', '03abcdef'), struct.unpack('c2c0', ' 0x3 abcdef'), struct.unpack('bc0', '\0abc')"#,
            r#"true "abc" "abc" "" "" 2"#,
        ),
        (
            r#"struct.unpack('c2c0', '0x3abcdef')"#,
            r#"false "user_script:1: format 'c0' needs a previous size""#,
        ),
        (r#"struct.unpack('bc0b', '\2abc')"#, r#"true "ab" 99 5"#),
        (
            r#"struct.unpack('b', 'abc', 2), struct.unpack('b', 'abc', 3), struct.unpack('', 'abc', 99), struct.unpack('', 'abc', -1), struct.unpack('', 'abc'), struct.unpack('b', 'abc', '2'), struct.unpack('b', 'abc', 2.9), struct.unpack('b', 'abc', nil)"#,
            r#"true 98 99 99 -1 1 98 98 97 2"#,
        ),
        (
            r#"struct.unpack('!4 b i', '\1\0\0\0\2\0\0\0'), struct.unpack('!4 b i', '\1\0\0\0\2\0\0\0', 2), struct.unpack('!2 b h', '\1\0\2\0'), struct.unpack('>!4 b <i >h', struct.pack('>!4 b <i >h', 1, 2, 3))"#,
            r#"true 1 0 1 1 2 3 11"#,
        ),
        (r#"struct.unpack('b', 12)"#, r#"true 49 2"#),
        (
            r#"struct.unpack(98, 'b')"#,
            r#"false "user_script:1: bad argument #1 to 'unpack' (invalid format option '9')""#,
        ),
        // unpack errors
        (
            r#"struct.unpack('b', '')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('i', 'abc')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('c4', 'abc')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('c2000000000', 'abc')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', 4)"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', 0)"#,
            r#"false "user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', 0.5)"#,
            r#"false "user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', -1)"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', 2^70)"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', 'x')"#,
            r#"false "user_script:1: bad argument #3 to 'unpack' (number expected, got string)""#,
        ),
        (
            r#"struct.unpack('b', 'abc', {})"#,
            r#"false "user_script:1: bad argument #3 to 'unpack' (number expected, got table)""#,
        ),
        (
            r#"struct.unpack('Y', 'abc')"#,
            r#"false "user_script:1: bad argument #1 to 'unpack' (invalid format option 'Y')""#,
        ),
        (
            r#"struct.unpack('Y', '')"#,
            r#"false "user_script:1: bad argument #1 to 'unpack' (invalid format option 'Y')""#,
        ),
        (
            r#"struct.unpack('bY', 'a')"#,
            r#"false "user_script:1: bad argument #1 to 'unpack' (invalid format option 'Y')""#,
        ),
        (
            r#"struct.unpack('s', 'abc')"#,
            r#"false "user_script:1: unfinished string in data""#,
        ),
        (
            r#"struct.unpack('c0', 'abc')"#,
            r#"false "user_script:1: format 'c0' needs a previous size""#,
        ),
        (
            r#"struct.unpack('xc0', 'abc')"#,
            r#"false "user_script:1: format 'c0' needs a previous size""#,
        ),
        (
            r#"struct.unpack('c1c0', 'abc')"#,
            r#"false "user_script:1: format 'c0' needs a previous size""#,
        ),
        (
            r#"struct.unpack('bc0', '\9abc')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('bc0', '\255abc')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (data string too short)""#,
        ),
        (
            r#"struct.unpack('i40', 'abc')"#,
            r#"false "user_script:1: integral size 40 is larger than limit of 32""#,
        ),
        (
            r#"struct.unpack('!6', 'abc')"#,
            r#"false "user_script:1: alignment 6 is not a power of 2""#,
        ),
        (
            r#"struct.unpack('b')"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (string expected, got no value)""#,
        ),
        (
            r#"struct.unpack()"#,
            r#"false "user_script:1: bad argument #1 to 'unpack' (string expected, got no value)""#,
        ),
        (
            r#"struct.unpack('b', {})"#,
            r#"false "user_script:1: bad argument #2 to 'unpack' (string expected, got table)""#,
        ),
        (
            r#"#{struct.unpack(string.rep('b', 7997), string.rep('a', 8000))}"#,
            r#"true 7998"#,
        ),
        (
            r#"struct.unpack(string.rep('b', 7998), string.rep('a', 8000))"#,
            r#"false "user_script:1: stack overflow (too many results)""#,
        ),
        // Under pcall (see `clib::room_to_raise`).
        (
            r#"pcall(struct.unpack, string.rep('b', 7998), string.rep('a', 8000))"#,
            r#"true false "stack overflow (too many results)""#,
        ),
        (
            r#"#{struct.unpack(string.rep('b', 7996), string.rep('a', 8000), 1)}"#,
            r#"true 7997"#,
        ),
        (
            r#"struct.unpack(string.rep('b', 7997), string.rep('a', 8000), 1)"#,
            r#"false "user_script:1: stack overflow (too many results)""#,
        ),
        (
            r#"#{struct.unpack(string.rep('x', 9000), string.rep('a', 9000))}"#,
            r#"true 1"#,
        ),
        // size
        (
            r#"struct.size(''), struct.size('b'), struct.size('bhilTfdx'), struct.size('!bhilTfdx'), struct.size('!4 b d'), struct.size('c7'), struct.size('i32'), struct.size('c2000000000 c2000000000'), struct.size('Yz9'), struct.size('bY'), struct.size('<>!2 b i')"#,
            r#"true 0 1 36 41 12 7 32 4000000000 0 1 6"#,
        ),
        (
            r#"struct.size('s')"#,
            r#"false "user_script:1: bad argument #1 to 'size' (option 's' has no fixed size)""#,
        ),
        (
            r#"struct.size('c0')"#,
            r#"false "user_script:1: bad argument #1 to 'size' (option 'c0' has no fixed size)""#,
        ),
        (
            r#"struct.size('b c0')"#,
            r#"false "user_script:1: bad argument #1 to 'size' (option 'c0' has no fixed size)""#,
        ),
        (
            r#"struct.size('b%')"#,
            r#"false "user_script:1: bad argument #1 to 'size' (invalid format option '%')""#,
        ),
        (
            r#"struct.size('!3')"#,
            r#"false "user_script:1: alignment 3 is not a power of 2""#,
        ),
        (
            r#"struct.size('i33')"#,
            r#"false "user_script:1: integral size 33 is larger than limit of 32""#,
        ),
        (
            r#"struct.size('c99999999999')"#,
            r#"false "user_script:1: integral size overflow""#,
        ),
        (
            r#"struct.size()"#,
            r#"false "user_script:1: bad argument #1 to 'size' (string expected, got no value)""#,
        ),
        (
            r#"struct.size({})"#,
            r#"false "user_script:1: bad argument #1 to 'size' (string expected, got table)""#,
        ),
        (r#"struct.size(12)"#, r#"true 0"#),
        // names in errors
        (
            r#"struct:size()"#,
            r#"false "user_script:1: calling 'size' on bad self (string expected, got table)""#,
        ),
        (
            r#"pcall(struct.pack, 'Y')"#,
            r#"true false "bad argument #1 to '?' (invalid format option 'Y')""#,
        ),
        (
            r#"(function() local p = struct.pack return p('Y') end)()"#,
            r#"false "user_script:1: bad argument #1 to 'p' (invalid format option 'Y')""#,
        ),
        // outputs past Lua's buffer size (8192 bytes), and a missing argument after one
        (
            r#"#struct.pack('c0 c0 i', string.rep('a', 10000), string.rep('b', 10000), 7), hx(struct.pack('c0 c0 >i', string.rep('a', 10000), string.rep('b', 10000), 7):sub(19997))"#,
            r#"true 20004 "6262626200000007""#,
        ),
        (
            r#"struct.pack('c0 i', string.rep('a', 9000))"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (number expected, got nil)""#,
        ),
        (
            r#"struct.pack('c0 s', string.rep('a', 20000))"#,
            r#"false "user_script:1: bad argument #3 to 'pack' (string expected, got nil)""#,
        ),
        (
            r#"#struct.pack(string.rep('i32', 300), unpack((function() local t = {} for i = 1, 300 do t[i] = i end return t end)()))"#,
            r#"true 9600"#,
        ),
    ]);
}
