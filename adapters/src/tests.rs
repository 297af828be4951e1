//! Every format against every other's captured file, and arbitrary input: refused with a
//! reason, never accepted by mistake, never a panic.

use proptest::prelude::*;

use crate::{Better, Format, MAX_INPUT_BYTES, parse};

/// One captured file per single-file format.
const FILES: [(Format, &[u8]); 9] = [
    (Format::Bmf, include_bytes!("../fixtures/bmf/bmf.json")),
    (Format::Hyperfine, include_bytes!("../fixtures/hyperfine/hyperfine.json")),
    (Format::Vitest, include_bytes!("../fixtures/vitest/vitest.json")),
    (Format::Tinybench, include_bytes!("../fixtures/tinybench/tinybench.json")),
    (Format::Mitata, include_bytes!("../fixtures/mitata/mitata.json")),
    (Format::PytestBenchmark, include_bytes!("../fixtures/pytest-benchmark/pytest-benchmark.json")),
    (Format::Pyperf, include_bytes!("../fixtures/pyperf/pyperf.json")),
    (Format::GoTest, include_bytes!("../fixtures/go/go-bench.txt")),
    (Format::GoogleBenchmark, include_bytes!("../fixtures/google-benchmark/gbench.json")),
];

#[test]
fn each_format_reads_its_own_file_and_refuses_every_other() {
    for (format, own) in FILES {
        assert!(parse(format, own).is_ok(), "{format} refused its own file");
        for (other, file) in FILES.iter().filter(|(f, _)| *f != format) {
            let refusal = parse(format, file).expect_err(&format!("{format} accepted {other}'s file"));
            assert_eq!(refusal.format, format);
            assert!(!refusal.reason.is_empty());
        }
    }
}

#[test]
fn names_round_trip_and_every_format_has_a_title() {
    for format in Format::ALL {
        assert_eq!(format.name().parse::<Format>(), Ok(format));
        assert!(!format.title().is_empty());
    }
    assert_eq!(
        "junit".parse::<Format>().unwrap_err(),
        "unknown benchmark format \"junit\"; expected one of bmf, hyperfine, vitest, tinybench, mitata, \
         pytest-benchmark, pyperf, go, criterion, google-benchmark"
    );
}

#[test]
fn oversized_compressed_and_folder_inputs_are_refused() {
    let big = vec![b' '; MAX_INPUT_BYTES + 1];
    assert!(parse(Format::Bmf, &big).unwrap_err().reason.contains("more than the"));
    assert_eq!(
        parse(Format::Pyperf, &[0x1f, 0x8b, 8, 0]).unwrap_err().reason,
        "a gzip-compressed file; write it uncompressed"
    );
    assert!(parse(Format::Criterion, b"{}").unwrap_err().reason.contains("a folder"));
    let many: String = (0..=crate::MAX_BENCHMARKS).map(|i| format!("BenchmarkX{i}  1  1 ns/op\n")).collect();
    assert_eq!(
        parse(Format::GoTest, many.as_bytes()).unwrap_err().reason,
        "10001 benchmarks, more than the 10000 taken"
    );
}

#[test]
fn every_value_read_is_finite_and_not_negative_and_its_unit_says_its_direction() {
    for (format, file) in FILES {
        for bench in parse(format, file).unwrap() {
            for m in bench.outcome.iter().flatten() {
                assert!(m.value.is_finite() && m.value >= 0.0, "{format} {}: {}", bench.name, m.value);
                assert_eq!(m.better, Better::of_unit(&m.unit), "{format} {}: {}", bench.name, m.unit);
                assert!(m.spread.iter().all(|f| f.value.is_finite()), "{format} {}", bench.name);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), i in 0usize..9) {
        let _ = parse(FILES[i].0, &bytes);
    }

    #[test]
    fn a_captured_file_cut_or_changed_anywhere_never_panics(i in 0usize..9, at in any::<usize>(), byte in any::<u8>()) {
        let (format, file) = FILES[i];
        let at = at % file.len();
        let _ = parse(format, &file[..at]);
        let mut changed = file.to_vec();
        changed[at] = byte;
        let _ = parse(format, &changed);
    }
}
