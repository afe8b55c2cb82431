//! A text column as the engine hands it out: `Utf8` (`StringArray`), or string views
//! (`Utf8View`, `StringViewArray`) from a fold that asks for them
//! ([`crate::read::LakeRead::fold_text_views`]: no text is copied while decoding). The views
//! read both the same way.

use arrow_array::cast::AsArray;
use arrow_array::{Array, StringArray, StringViewArray};

/// One batch's text column, of either layout.
#[derive(Debug, Clone, Copy)]
pub enum Text<'a> {
    Utf8(&'a StringArray),
    Views(&'a StringViewArray),
}

impl<'a> Text<'a> {
    /// `array` as text; `None` when it holds something else.
    pub fn of(array: &'a dyn Array) -> Option<Self> {
        if let Some(strings) = array.as_string_opt::<i32>() {
            return Some(Self::Utf8(strings));
        }
        array.as_string_view_opt().map(Self::Views)
    }

    /// Whether row `i` has a value.
    pub fn is_valid(&self, i: usize) -> bool {
        match self {
            Self::Utf8(a) => a.is_valid(i),
            Self::Views(a) => a.is_valid(i),
        }
    }

    /// Row `i`'s text (empty for a null row; check [`Text::is_valid`]).
    pub fn value(&self, i: usize) -> &'a str {
        match self {
            Self::Utf8(a) => a.value(i),
            Self::Views(a) => a.value(i),
        }
    }

    /// Row `i`'s text, `None` when null.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        self.is_valid(i).then(|| self.value(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int32Array;

    #[test]
    fn both_layouts_read_the_same_and_others_are_not_text() {
        let values = [
            Some("host-a"),
            None,
            Some("a name longer than twelve bytes"),
        ];
        let utf8 = StringArray::from(values.to_vec());
        let views = StringViewArray::from(values.to_vec());
        for text in [Text::of(&utf8).unwrap(), Text::of(&views).unwrap()] {
            let read: Vec<Option<&str>> = (0..3).map(|i| text.get(i)).collect();
            assert_eq!(read, values.to_vec());
            assert!(!text.is_valid(1));
        }
        assert!(Text::of(&Int32Array::from(vec![1])).is_none());
    }
}
