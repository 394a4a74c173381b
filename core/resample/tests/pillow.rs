//! `resize` against Pillow's `Image.resize(…, Image.BILINEAR)` (the values in the
//! comments are Pillow 13's). An integration test, not unit tests: those would compile the
//! resampler's generic code a second time (Cargo.toml).

use pipeline_resample::{resize, Window};

fn whole(width: u32, height: u32) -> Window {
    Window {
        left: 0.0,
        top: 0.0,
        width: width as f64,
        height: height as f64,
    }
}

#[test]
fn the_same_size_is_the_same_image_and_a_flat_image_stays_flat() {
    let ramp: Vec<u8> = (0..48).collect();
    assert_eq!(resize(&ramp, (4, 4), 3, whole(4, 4), (4, 4)), ramp);
    // Image.frombytes("L", (6, 5), bytes([7] * 30)).resize((3, 2)): six 7s.
    let flat = vec![7u8; 6 * 5];
    assert_eq!(resize(&flat, (6, 5), 1, whole(6, 5), (3, 2)), vec![7u8; 6]);
}

#[test]
fn halving_averages_neighbours() {
    // Image.frombytes("L", (2, 1), bytes([0, 200])).resize((1, 1)): 100.
    assert_eq!(resize(&[0, 200], (2, 1), 1, whole(2, 1), (1, 1)), vec![100]);
}
