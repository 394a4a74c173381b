//! Closed sets of names a manifest writes (`loss "mse"`, `precision "bf16-mixed"`),
//! each defined once: [`choice!`] declares the enum with each variant's manifest string,
//! and generates from that one list
//!
//! - `ALL`, every variant, in order;
//! - `NAMES`, their strings in the same order (usable in `const` items: the schema's
//!   `Ty::Choice` lists are these, so the schema and the enum cannot disagree);
//! - `parse`, a string to its variant (`None` for any other string);
//! - `as_str`, a variant to its string (an exhaustive match).
//!
//! Serde attributes are written at the enum as before, and kept as they were: the
//! serialised specs are cache keys. A test (`manifest.rs`) checks that each variant
//! serialises to its manifest string.

/// A fieldless enum whose variants are manifest strings: see the module documentation.
///
/// ```ignore
/// choice! {
///     #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
///     #[serde(rename_all = "lowercase")]
///     pub enum Scale {
///         None = "none",
///         Standard = "standard",
///         MinMax = "minmax",
///     }
/// }
/// ```
macro_rules! choice {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $text:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant,
            )+
        }

        impl $name {
            /// Every variant, in the order of [`Self::NAMES`].
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every variant's manifest string, in the order of [`Self::ALL`].
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The variant written `text` in a manifest, if any.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The variant's manifest string.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }
    };
}
