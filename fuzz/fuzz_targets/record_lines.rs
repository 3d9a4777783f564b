//! The fuzz target of `toolplane::fuzz_checks::record_lines` (its docs say what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolplane::fuzz_checks::record_lines(data));
