use super::*;

#[test]
fn every_function_fits_the_argument_array_and_has_a_unique_path() {
    for f in &API {
        assert!(f.params.len() <= MAX_PARAMS, "{:?}", f.path);
        assert!(f.required <= f.params.len(), "{:?}", f.path);
        assert_eq!(API.iter().filter(|g| g.path == f.path).count(), 1);
    }
    assert!(find(&["log", "info"]).is_some());
    assert!(find(&["nope"]).is_none());
}
