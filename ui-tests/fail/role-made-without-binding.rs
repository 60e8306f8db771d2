// A role's value exists only once the role is bound: it has no `Default` and cannot be
// built by hand; `Encoder::resolve()?` gives it.
use locus::role;

role!(Encoder);

fn main() {
    let _ = Encoder::default();
}
