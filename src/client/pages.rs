//! Paged listings gathered whole.

use std::collections::HashSet;

use super::ClientError;

/// Every item of a paged listing: `page` is asked for the page of each token in turn (the
/// first page's is empty), and answers its items and the next page's token (empty after the
/// last page). A next token already asked for is [`ClientError::PagesInACircle`]: a server
/// whose pages loop (toolplane's do not) would otherwise be asked for them forever, its items
/// gathered without end.
pub(crate) async fn every_page<T, Page>(
    mut page: impl FnMut(String) -> Page,
) -> Result<Vec<T>, ClientError>
where
    Page: std::future::Future<Output = Result<(Vec<T>, String), ClientError>>,
{
    let mut items = Vec::new();
    let mut asked = HashSet::new();
    let mut page_token = String::new();
    loop {
        let (more, next_page_token) = page(page_token).await?;
        items.extend(more);
        if next_page_token.is_empty() {
            return Ok(items);
        }
        if !asked.insert(next_page_token.clone()) {
            let token = next_page_token.chars().take(64).collect();
            return Err(ClientError::PagesInACircle { token });
        }
        page_token = next_page_token;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Pages linked by `links` (token to items and next token), gathered from the first.
    async fn gathered(links: &[(&str, u32, &str)]) -> Result<Vec<u32>, ClientError> {
        let links: BTreeMap<_, _> = (links.iter())
            .map(|&(token, item, next)| (token.to_owned(), (item, next.to_owned())))
            .collect();
        let links = &links;
        every_page(|token| async move {
            let (item, next) = links.get(&token).expect("a token answered before").clone();
            Ok((vec![item], next))
        })
        .await
    }

    /// Pages are gathered in order to the last; a next token asked for already ends the
    /// listing with an error instead of going round forever.
    #[tokio::test]
    async fn pages_that_go_round_in_a_circle_are_not_followed() {
        let pages = gathered(&[("", 1, "b"), ("b", 2, "c"), ("c", 3, "")]).await;
        assert_eq!(pages.expect("three pages"), [1, 2, 3]);

        for circle in [
            &[("", 1, "b"), ("b", 2, "b")][..],
            &[("", 1, "b"), ("b", 2, "c"), ("c", 3, "b")][..],
        ] {
            let error = gathered(circle).await.expect_err("a circle");
            assert!(
                matches!(&error, ClientError::PagesInACircle { token } if token == "b"),
                "{error}"
            );
        }
    }
}
