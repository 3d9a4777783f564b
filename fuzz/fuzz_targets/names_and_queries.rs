//! The fuzz target of `toolplane::fuzz_checks::names_and_queries` (its docs say what it checks).

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| toolplane::fuzz_checks::names_and_queries(data));
